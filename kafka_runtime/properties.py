"""Load a :class:`ServerConfig` from a ``server.properties`` file (the I/O edge of
``kafka_common.config``).

Unknown keys print a warning to stderr; an invalid value or an unreadable file raises
:class:`ConfigLoadError` whose message names the file, key and value —
:func:`load_or_exit` turns it into a one-line reason and exit status 2.
"""

from __future__ import annotations

import sys

from kafka_common.config import ConfigError, ServerConfig, parse_config, with_defaults_applied
from kafka_common.meta_properties import MetaPropertiesError
from kafka_runtime.errors import KafkaRuntimeError


class ConfigLoadError(KafkaRuntimeError):
    """The config file cannot be used; the message says why (file, key, value)."""


def load_config(path: str, overrides: dict[str, str] | None = None, *, warn=None) -> ServerConfig:
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as exc:
        raise ConfigLoadError(f"{path}: cannot read config: {exc.strerror or exc}") from None
    try:
        cfg = parse_config(text, overrides)
    except (ConfigError, MetaPropertiesError) as exc:
        raise ConfigLoadError(f"{path}: invalid config: {exc}") from None
    report = warn if warn is not None else (lambda msg: print(msg, file=sys.stderr, flush=True))
    for warning in cfg.warnings:
        report(f"{path}: warning: {warning}")
    return with_defaults_applied(cfg)


def load_or_exit(path: str, prog: str) -> ServerConfig:
    try:
        return load_config(path)
    except ConfigLoadError as exc:
        print(f"{prog}: {exc}", file=sys.stderr, flush=True)
        raise SystemExit(2) from None
