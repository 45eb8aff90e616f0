"""Out-of-core construction: graphs larger than a process's memory, built on Ray Data.

``disk_graph``: Parquet tables (``gnnsys.datasets.parquet``) -> a CSR graph on disk, opened
memory-mapped as a ``Graph`` that the partitioners and the store writer read through the page
cache. This unit runs distributed work (Ray Data tasks), so, like ``gnnsys.train``, it may
import Ray; the stages it drives (datasets, partitioners, store) never do.
"""

from gnnsys.out_of_core.disk_graph import build_disk_graph, disk_graph_bytes, open_disk_graph
from gnnsys.out_of_core.runtime import Plan, cluster_cpus, parse_bytes, start_ray, stop_ray

__all__ = [
    "Plan",
    "build_disk_graph",
    "cluster_cpus",
    "disk_graph_bytes",
    "open_disk_graph",
    "parse_bytes",
    "start_ray",
    "stop_ray",
]
