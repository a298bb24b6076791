"""``mooncake.store`` backed by kvfabric (kvfabric.compat.mooncake)."""

from kvfabric.compat.mooncake import *  # noqa: F401,F403
from kvfabric.compat.mooncake import BufferHandle, MooncakeDistributedStore, ReplicateConfig  # noqa: F401
