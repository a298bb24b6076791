"""Mooncake namespace provided by kvfabric-mooncake-shim: ``mooncake.store``
is kvfabric's Mooncake-compatible facade. Do not install this next to the
real ``mooncake-transfer-engine`` package; both provide ``mooncake``."""
