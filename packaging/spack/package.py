# Spack recipe for r3 (Record, Remix, Replay). Not in Spack's builtin repository: put it in a
# repository of your own, e.g. with Spack 1.x
#
#   spack repo create ~/r3-spack r3local
#   mkdir -p <the packages/ directory it names>/r3
#   cp packaging/spack/package.py <that packages/ directory>/r3/package.py
#   spack repo add ~/r3-spack
#   spack install r3@main
#
# or build a local checkout instead of the git branch, inside an environment:
#
#   spack env create -d . && spack -e . add r3@main && spack -e . develop --path "$PWD" r3@main
#   spack -e . install
#
# LLVM 22 comes from Spack's llvm package: its static component libraries are what r3 links
# (BUILD_SHARED_LIBS is always off there), its clang is what r3-clang++ wraps at run time, and
# +link_llvm_dylib makes that clang load r3's capture plugin (`llvm-config --shared-mode` says
# "shared"; without it r3 captures device IR with a second device compile instead). The CUDA
# SDK is only needed at run time (r3 loads libcuda itself; the driver is the host's).

import os

# Spack 1.x layout (the build systems live in the builtin package repository). For Spack 0.2x,
# drop this line: there `from spack.package import *` provides CargoPackage.
from spack_repo.builtin.build_systems.cargo import CargoPackage

from spack.package import *


class R3(CargoPackage):
    """r3 tunes CUDA kernels without a human in the loop: r3-clang++ (a drop-in clang) records
    each kernel's device LLVM IR while it compiles, r3 record stores each launch's inputs and
    outputs, r3 tune searches LLVM pass pipelines, e-graph rewrites, codegen and launch knobs
    per kernel, replaying every candidate on the GPU against the recordings, and the driver
    rebuilds the application with the winners. LLVM 22 is linked in statically."""

    homepage = "https://example.invalid/r3"
    # The project has no public remote yet: set this to the repository r3 is published at.
    git = "https://example.invalid/r3.git"

    license("Apache-2.0")

    version("main", branch="main")

    requires("platform=linux", msg="r3 tunes CUDA kernels on Linux only")

    # llvm-sys compiles a small C wrapper (cc crate); rustc links through the C compiler; the
    # static LLVM libraries need the C++ runtime.
    depends_on("c", type="build")
    depends_on("cxx", type="build")
    # The oldest rust-version among the crates in Cargo.lock is 1.88 (proptest, time, ...).
    depends_on("rust@1.88:", type="build")
    # zstd-sys finds the system libzstd with pkg-config.
    depends_on("pkgconfig", type="build")
    # build.rs asks git for the commit that `r3 doctor` prints.
    depends_on("git", type="build")

    # llvm-sys 221 (Cargo.lock) wants LLVM 22.1; inkwell's features name the NVPTX and X86
    # targets. run: r3-clang++ runs this clang, and builds its plugin against this LLVM.
    depends_on(
        "llvm@22.1 +clang +llvm_dylib +link_llvm_dylib targets=nvptx,x86",
        type=("build", "link", "run"),
    )
    # r3 links libzstd.so; programs that r3-clang++ links for recording take libzstd.a.
    depends_on("zstd libs=shared,static", type=("build", "link", "run"))
    depends_on("zlib-api")
    # The SDK r3-clang++ compiles CUDA against, and whose ptxas checks candidate PTX.
    depends_on("cuda@13.0", type="run")

    @property
    def build_args(self):
        # The versions in Cargo.lock, as CI builds them.
        return ["--locked"]

    @property
    def check_args(self):
        return ["--release", "--locked"]

    def setup_build_environment(self, env):
        # llvm-sys 221.x reads LLVM_SYS_221_PREFIX (<prefix>/bin/llvm-config); crates/r3-ir's
        # build script runs <prefix>/bin/llc for the NVPTX processor list. It overrides the
        # /usr/lib/llvm-22 default of the checkout's .cargo/config.toml (force = false there).
        env.set("LLVM_SYS_221_PREFIX", self.spec["llvm"].prefix)

    def setup_run_environment(self, env):
        llvm = self.spec["llvm"]
        # r3 looks for clang++-22 / clang-22 on PATH; Spack's llvm has clang and clang++.
        env.set("R3_CLANG", join_path(llvm.prefix.bin, "clang"))
        env.set("R3_CLANGXX", join_path(llvm.prefix.bin, "clang++"))
        env.set("R3_CUDA_PATH", self.spec["cuda"].prefix)
        # The recording runtime is linked with -l:libzstd.a, found through LIBRARY_PATH.
        for directory in self.spec["zstd"].libs.directories:
            env.prepend_path("LIBRARY_PATH", directory)

    @run_after("install")
    def install_drivers_and_toolchain(self):
        # r3 is the compiler driver when called as r3-clang++ or r3-clang (it dispatches on
        # argv[0]): the same links scripts/setup makes beside it.
        with working_dir(self.prefix.bin):
            for name in ("r3-clang++", "r3-clang", "r3-nvcc"):
                if os.path.lexists(name):
                    os.remove(name)
                symlink("r3", name)
        mkdirp(self.prefix.share.r3)
        install(
            join_path(self.stage.source_path, "scripts", "r3-toolchain.cmake"),
            self.prefix.share.r3,
        )

    def test_version(self):
        """r3 --version runs"""
        r3 = Executable(self.prefix.bin.r3)
        out = r3("--version", output=str.split, error=str.split)
        assert out.startswith("r3 ")

    def test_selftest(self):
        """r3 selftest lowers its built-in kernel to PTX (the GPU steps need a GPU)"""
        r3 = Executable(self.prefix.bin.r3)
        r3("selftest")

    def test_driver(self):
        """r3-clang++ is the driver: it forwards --version to clang"""
        driver = Executable(join_path(self.prefix.bin, "r3-clang++"))
        out = driver("--version", output=str.split, error=str.split)
        assert "clang version 22" in out
