"""The nemesis (I/O): each fault kind implements one protocol (:class:`~harness.nemesis.protocol.Nemesis`:
inject, heal, describe); :class:`~harness.nemesis.executor.FaultExecutor` binds refs and drives them."""
