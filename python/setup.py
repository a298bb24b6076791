"""Builds the kvfabric Python package with its native parts.

The package carries two files built from the Go module:

  kvfabric/_lib/libkvfabric.so  the C ABI (go build -buildmode=c-shared ./capi),
                                loaded with ctypes
  kvfabric/_bin/kvfabric        the kvfabric binary (go build ./cmd/kvfabric),
                                run by the `kvfabric` console command

`pip install ./python` builds both with the Go toolchain in the repository
(cgo needs a C compiler, nothing else does). KVFABRIC_LIB and KVFABRIC_CLI
name prebuilt files to package instead — `make wheel` builds them with zig cc
against an old glibc and sets KVFABRIC_PLAT_NAME (a manylinux tag) for the
wheel's platform.

The version is VERSION at the repository root, the one source for the
binary, the library and the wheels.
"""

import os
import shutil
import subprocess

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

try:  # setuptools >= 70.1 carries bdist_wheel itself
    from setuptools.command.bdist_wheel import bdist_wheel
except ImportError:
    from wheel.bdist_wheel import bdist_wheel

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
                "; build from a checkout (pip install ./python) or `make wheel`"
            )
        d = parent


def version():
    with open(os.path.join(repo_root(), "VERSION")) as f:
        return f.read().strip()


def go_build(out, args):
    go = shutil.which(os.environ.get("GO", "go"))
    if not go:
        raise SystemExit(
            "kvfabric: the Go toolchain is required to build " + os.path.basename(out) +
            " (or set KVFABRIC_LIB and KVFABRIC_CLI to prebuilt files; `make wheel` builds a wheel that needs no Go)"
        )
    env = dict(os.environ, CGO_ENABLED="1")
    subprocess.check_call([go, "build", "-trimpath", "-o", out, *args], cwd=repo_root(), env=env)


class BuildWithGo(build_py):
    def run(self):
        super().run()
        pkg = os.path.join(self.build_lib, "kvfabric")
        # go runs in the repo root: absolute output paths.
        lib = os.path.abspath(os.path.join(pkg, "_lib", "libkvfabric.so"))
        cli = os.path.abspath(os.path.join(pkg, "_bin", "kvfabric"))
        os.makedirs(os.path.dirname(lib), exist_ok=True)
        os.makedirs(os.path.dirname(cli), exist_ok=True)

        if os.environ.get("KVFABRIC_LIB"):
            shutil.copyfile(os.environ["KVFABRIC_LIB"], lib)
        else:
            go_build(lib, ["-buildmode=c-shared", "./capi"])
            hdr = os.path.splitext(lib)[0] + ".h"  # cgo's generated header; kvfabric.h is the contract
            if os.path.exists(hdr):
                os.remove(hdr)
        if os.environ.get("KVFABRIC_CLI"):
            shutil.copyfile(os.environ["KVFABRIC_CLI"], cli)
        else:
            go_build(cli, ["./cmd/kvfabric"])
        os.chmod(cli, 0o755)  # the wheel records the mode; pip restores it
        shutil.copyfile(os.path.join(repo_root(), "capi", "kvfabric.h"), os.path.join(os.path.dirname(lib), "kvfabric.h"))
        # The checkout's _version.py reads VERSION; the built one is literal.
        with open(os.path.join(pkg, "_version.py"), "w") as f:
            f.write('"""The release of this package (VERSION at build time)."""\n\n')
            f.write(f"__version__ = {version()!r}\n")


class BinaryDistribution(Distribution):
    def has_ext_modules(self):
        return True  # a platform wheel: it carries a native library and binary


class PlatformWheel(bdist_wheel):
    """Tags the wheel py3-none-<platform>: the package is Python code over
    ctypes, so any Python 3 of that platform runs it; the platform is
    KVFABRIC_PLAT_NAME (e.g. manylinux_2_28_x86_64) or this machine's."""

    def finalize_options(self):
        plat = os.environ.get("KVFABRIC_PLAT_NAME")
        if plat:
            self.plat_name = plat
        super().finalize_options()
        self.root_is_pure = False

    def get_tag(self):
        _, _, plat = super().get_tag()
        return "py3", "none", plat


setup(
    version=version(),
    cmdclass={"build_py": BuildWithGo, "bdist_wheel": PlatformWheel},
    distclass=BinaryDistribution,
)
