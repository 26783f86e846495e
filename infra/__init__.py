"""Host side of the jbodlab lab (root only): node image, disks, faults, containers, cleanup.

Entry points for the lab engineer (details in docs/infra.md):

- ``infra.lab.Lab`` / ``Topology`` / ``NodeSpec`` — provision nodes × dirs on real disks,
  start node containers, make faults, tear down.
- ``infra.faults.DiskFaultHandle`` — ``error``, ``error-reads``, ``error-writes``, ``flaky``,
  ``delay``, ``enospc``, ``remove``, ``corrupt-reads``, ``corrupt-writes``, ``bad-blocks``,
  ``lose-unsynced``, ``permission``, optionally on one file's blocks (``infra.extents``);
  ``infra.power`` (power cuts); backends ``fuse`` / ``dm`` (``infra.capability``).
- ``infra.netfaults`` — ``Partition``, ``Isolate``, ``Netem``; ``infra.procfaults`` —
  ``ProcessFaultHandle`` (kill / pause / restart), ``sample`` (psutil).
- ``infra.docker`` — ``ContainerSpec`` + ``Docker`` (docker-py: containers, exit events, stats).
- ``infra.image`` — ``ensure_node_image()``, ``node_image_tag()``.
- ``infra.cleanup`` — ``cleanup()`` / ``remove_lab()``; CLI ``jbodlab setup`` / ``jbodlab cleanup``.
"""
