"""Host side of the jbodlab lab (root only): node image, disks, faults, containers, cleanup.

Entry points for the lab engineer (details in docs/infra.md):

- ``infra.lab.Lab`` / ``Topology`` / ``NodeSpec`` — provision nodes × dirs on real disks,
  start node containers, make faults, tear down.
- ``infra.faults.DiskFault`` — ``error``, ``error-reads``, ``error-writes``, ``flaky``,
  ``delay``, ``enospc``, ``remove``; backends ``fuse`` / ``dm`` (``infra.capability``).
- ``infra.netfaults`` — ``Partition``, ``Isolate``, ``Netem``; ``infra.procfaults`` —
  ``ProcessFault`` (kill / pause / restart), ``sample`` (psutil).
- ``infra.docker`` — ``ContainerSpec`` + ``Docker`` (CLI wrapper).
- ``infra.image`` — ``ensure_node_image()``, ``node_image_tag()``.
- ``infra.cleanup`` — ``cleanup()`` / ``remove_lab()``; CLI ``jbodlab setup`` / ``jbodlab cleanup``.
"""
