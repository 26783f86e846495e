"""The controller's metadata log on disk (see metadata_log)."""

from controller_impl.log.metadata_log import DIR_NAME, LogError, MetadataLog, Recovery

__all__ = ["DIR_NAME", "LogError", "MetadataLog", "Recovery"]
