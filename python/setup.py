"""Builds libkvfabric.so with the Go toolchain into kvfabric/_lib/.

`pip install ./python` runs `go build -buildmode=c-shared ./capi` in the
repository (cgo needs a C compiler, nothing else does). Set KVFABRIC_LIB to a
prebuilt libkvfabric.so to package that file instead of building.
"""

import os
import shutil
import subprocess

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

HERE = os.path.dirname(os.path.abspath(__file__))
MODULE = "module github.com/kvfabric/kvfabric"


def repo_root():
    d = HERE
    while True:
        gomod = os.path.join(d, "go.mod")
        if os.path.exists(gomod):
            with open(gomod) as f:
                if f.readline().strip() == MODULE:
                    return d
        parent = os.path.dirname(d)
        if parent == d:
            raise SystemExit(
                "kvfabric: cannot find the kvfabric Go module above " + HERE +
                "; build from a checkout (pip install ./python) or set KVFABRIC_LIB"
            )
        d = parent


class BuildWithGo(build_py):
    def run(self):
        super().run()
        out_dir = os.path.join(self.build_lib, "kvfabric", "_lib")
        os.makedirs(out_dir, exist_ok=True)
        out = os.path.abspath(os.path.join(out_dir, "libkvfabric.so"))  # go runs in the repo root
        prebuilt = os.environ.get("KVFABRIC_LIB")
        if prebuilt:
            shutil.copyfile(prebuilt, out)
            return
        go = shutil.which(os.environ.get("GO", "go"))
        if not go:
            raise SystemExit("kvfabric: the Go toolchain is required to build libkvfabric.so (or set KVFABRIC_LIB)")
        env = dict(os.environ, CGO_ENABLED="1")
        subprocess.check_call(
            [go, "build", "-trimpath", "-buildmode=c-shared", "-o", out, "./capi"], cwd=repo_root(), env=env
        )
        hdr = os.path.splitext(out)[0] + ".h"  # cgo's generated header; kvfabric.h is the contract
        if os.path.exists(hdr):
            os.remove(hdr)
        shutil.copyfile(os.path.join(repo_root(), "capi", "kvfabric.h"), os.path.join(os.path.dirname(out), "kvfabric.h"))


class BinaryDistribution(Distribution):
    def has_ext_modules(self):
        return True  # a platform wheel: it carries a native library


setup(cmdclass={"build_py": BuildWithGo}, distclass=BinaryDistribution)
