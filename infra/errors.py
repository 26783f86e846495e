"""Errors of the host side of the lab.

::

    InfraError                      anything infra/ raises on purpose
    ├── CommandError                an external command (docker, losetup, mkfs, …) failed
    ├── SetupError                  host set-up or node image build failed
    │   └── faultfs_build.BuildError    the native FUSE daemon cannot be built on this host
    ├── CapabilityError             the host lacks what was asked for (e.g. dm without /dev/mapper/control)
    ├── DeviceError                 loop / dm / filesystem / FUSE daemon trouble
    ├── FaultError                  a fault could not be injected or healed
    ├── ContainerError              a container operation failed
    ├── dm_logwrites.LogFormatError not a dm-log-writes log, or cut short (also ValueError)
    └── fault_image.FaultImageError an op the FUSE image's mode refuses (also OSError; the
                                    daemon answers EIO)

Each message names the resource and the problem; nothing is swallowed silently.
"""

from __future__ import annotations


class InfraError(Exception):
    """Base of every error raised on purpose by infra/: a host, device, container or fault
    the lab's host side cannot set up, act on or clean up (the message names it). Callers
    catch it to report the problem and go on tearing down, or to fail ``jbodlab setup``
    with one line."""


class CommandError(InfraError):
    def __init__(self, argv: list[str], returncode: int, stderr: str) -> None:
        self.argv = list(argv)
        self.returncode = returncode
        self.stderr = stderr
        tail = stderr.strip().splitlines()[-3:] if stderr else []
        super().__init__(f"command {' '.join(argv)!r} exited {returncode}: {' | '.join(tail) or '(no stderr)'}")


class SetupError(InfraError):
    pass


class CapabilityError(InfraError):
    pass


class DeviceError(InfraError):
    pass


class FaultError(InfraError):
    pass


class ContainerError(InfraError):
    pass
