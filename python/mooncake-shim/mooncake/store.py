"""``mooncake.store`` backed by kvfabric (kvfabric.compat.mooncake): the
names of Mooncake's module that kvfabric provides. python/README.md lists
what each method of MooncakeDistributedStore does here."""

from kvfabric.compat.mooncake import *  # noqa: F401,F403
from kvfabric.compat.mooncake import (  # noqa: F401
    BufferHandle,
    Descriptor,
    MemoryDescriptor,
    MooncakeDistributedStore,
    MooncakeHostMemAllocator,
    ObjectDataType,
    ReplicaDescriptor,
    ReplicaStatus,
    ReplicateConfig,
    SoftPinAction,
)

# Mooncake exports ObjectDataType's members at module level (export_values()).
UNKNOWN, KVCACHE, TENSOR, WEIGHT, SAMPLE, ACTIVATION, GRADIENT, OPTIMIZER_STATE, METADATA, GENERAL = ObjectDataType
# And ReplicaStatus's.
UNDEFINED, INITIALIZED, PROCESSING, COMPLETE, REMOVED, FAILED = ReplicaStatus
