"""The controller's metadata log on disk (see metadata_log)."""

from controller_impl.log.metadata_log import MetadataLog
from controller_impl.log.recovery import Recovery
from controller_impl.log.segments import DIR_NAME, LogError

__all__ = ["DIR_NAME", "LogError", "MetadataLog", "Recovery"]
