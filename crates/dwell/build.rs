//! Compiles `bpf/dwell.bpf.c` with clang when the `bpf` feature is on.
//!
//! The default build needs no clang: without the feature this script does
//! nothing and the binary reports that it was built without BPF support.
//! The C program uses CO-RE against a hand-written subset of kernel types
//! (`bpf/vmlinux_min.h`), so neither bpftool nor the build machine's kernel
//! BTF is needed here; aya relocates the field offsets at load time.

use std::env;
use std::path::PathBuf;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=bpf/dwell.bpf.c");
    println!("cargo:rerun-if-changed=bpf/dwell.h");
    println!("cargo:rerun-if-changed=bpf/vmlinux_min.h");
    println!("cargo:rerun-if-env-changed=CLANG");
    println!("cargo:rerun-if-env-changed=CORELAY_DWELL_BPF_CFLAGS");

    if env::var_os("CARGO_FEATURE_BPF").is_none() {
        return;
    }

    let manifest = PathBuf::from(env::var("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));
    let out = PathBuf::from(env::var("OUT_DIR").expect("OUT_DIR"));
    let src = manifest.join("bpf").join("dwell.bpf.c");
    let obj = out.join("dwell.bpf.o");

    let arch = env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_else(|_| "x86_64".into());
    let (target_arch, multiarch) = match arch.as_str() {
        "x86_64" => ("x86", "x86_64-linux-gnu"),
        "aarch64" => ("arm64", "aarch64-linux-gnu"),
        "riscv64" => ("riscv", "riscv64-linux-gnu"),
        "powerpc64" => ("powerpc", "powerpc64le-linux-gnu"),
        "s390x" => ("s390", "s390x-linux-gnu"),
        other => (other, ""),
    };

    let clang = env::var("CLANG").unwrap_or_else(|_| "clang".into());
    let mut cmd = Command::new(&clang);
    cmd.args([
        "-target", "bpf", "-mcpu=v3", "-O2", "-g", "-Wall", "-Werror",
    ])
    .arg(format!("-D__TARGET_ARCH_{target_arch}"))
    .arg("-I")
    .arg(manifest.join("bpf"));
    if !multiarch.is_empty() {
        // <linux/bpf.h> includes <asm/types.h>, which Debian keeps under
        // the multiarch directory that `-target bpf` does not search.
        cmd.arg("-I").arg(format!("/usr/include/{multiarch}"));
    }
    if let Ok(extra) = env::var("CORELAY_DWELL_BPF_CFLAGS") {
        cmd.args(extra.split_whitespace());
    }
    cmd.arg("-c").arg(&src).arg("-o").arg(&obj);

    let status = match cmd.status() {
        Ok(s) => s,
        Err(e) => {
            eprintln!(
                "error: the `bpf` feature needs clang to compile {}: running `{clang}` failed: {e}\n\
                 hint: apt-get install -y clang llvm libbpf-dev (or set CLANG=/path/to/clang)",
                src.display()
            );
            std::process::exit(1);
        }
    };
    if !status.success() {
        eprintln!(
            "error: clang failed ({status}) compiling {}\n\
             hint: the program needs libbpf headers (<bpf/bpf_helpers.h>) and kernel uapi \
             headers (<linux/bpf.h>): apt-get install -y libbpf-dev linux-libc-dev",
            src.display()
        );
        std::process::exit(1);
    }
}
