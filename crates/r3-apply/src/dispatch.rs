//! Variants chosen at launch: the table that tells r3's runtime (`r3rt.c`, linked into every
//! program r3-clang++ links) which extra entries of a kernel exist and when each may run.
//!
//! The shim adds each variant to the PTX as an entry of its own ([`entry_name`]) beside the
//! generic one, and writes its part of the table (`dispatch-<arch>.txt`, one line per
//! variant) into the apply directory. The driver passes clang `-Xarch_host
//! -include<dir>/r3-dispatch.h`; the host side of the same compile runs after ptxas, so the
//! header holds the whole translation unit's table by then. It is a constructor that hands
//! the table to `r3_dispatch_add`, a weak reference: a program linked without r3's runtime
//! runs the generic code, as does any launch no variant's guard admits. The header is
//! replaced whole under a lock, so that ptxas runs for several architectures at once each add
//! their part.
//!
//! A table line: `v <kernel> <arch> <entry> <max threads or 0> <block x,y,z or -> <grid x,y,z
//! or -> <relaunch block x or 0> <argument count> [<index>:<hex bytes>]...`, in the order a
//! launch tries them. And one line per kernel the compile ships tuned code for (variants or
//! not), `s <kernel> <arch> <kernel hash> <PTX hash>,...` (`store::programs::ShippedKernel`):
//! the runtime takes no decision by it, and a time-only run passes it on, so that r3 knows
//! which code it timed (`store::judge`).

use crate::plan::Guard;
use crate::store::programs::ShippedKernel;
use std::path::{Path, PathBuf};

/// The header the driver includes into the host compile.
pub const HEADER: &str = "r3-dispatch.h";
/// The table format's first line; r3rt.c refuses any other.
pub const MAGIC: &str = "r3-dispatch 1";

/// One variant of a kernel as the runtime needs it.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    /// The generic entry's (mangled) name.
    pub kernel: String,
    pub arch: String,
    /// The variant's entry name in the PTX.
    pub entry: String,
    pub guard: Guard,
}

/// The entry name of a kernel's `n`th variant (from 1): the kernel's name, its content hash's
/// tag and the number, so that variants of same-named kernels of different translation units
/// never share a name.
pub fn entry_name(kernel: &str, tag: &str, n: usize) -> String {
    format!("{kernel}__r3_{tag}_v{n}")
}

/// The table line of one row.
pub fn line(r: &Row) -> String {
    let dims =
        |d: Option<[u32; 3]>| d.map_or("-".to_string(), |d| format!("{},{},{}", d[0], d[1], d[2]));
    let values = r.guard.values.as_ref();
    let args: Vec<String> = values
        .map(|v| {
            v.args
                .iter()
                .map(|a| format!("{}:{}", a.index, a.hex))
                .collect()
        })
        .unwrap_or_default();
    let mut out = format!(
        "v {} {} {} {} {} {} {} {}",
        r.kernel,
        r.arch,
        r.entry,
        r.guard.max_threads.unwrap_or(0),
        dims(values.and_then(|v| v.block)),
        dims(values.and_then(|v| v.grid)),
        r.guard.block_x.unwrap_or(0),
        args.len()
    );
    for a in args {
        out.push(' ');
        out.push_str(&a);
    }
    out
}

/// The header for a whole table (the rows of every architecture, in order).
pub fn header(lines: &[String]) -> String {
    let mut table = String::from(MAGIC);
    for l in lines {
        table.push('\n');
        table.push_str(l);
    }
    let literal: String = table
        .chars()
        .flat_map(|c| match c {
            '\n' => vec!['\\', 'n'],
            '"' | '\\' => vec!['\\', c],
            c => vec![c],
        })
        .collect();
    format!(
        "/* r3: the variants of this translation unit's kernels, chosen at launch by r3's runtime */\n\
         #ifndef __CUDA_ARCH__\n\
         #ifdef __cplusplus\n\
         extern \"C\" {{\n\
         #endif\n\
         __attribute__((weak)) void r3_dispatch_add(const char *table);\n\
         __attribute__((constructor(101), used)) static void r3_dispatch_init(void) {{\n\
         \x20 if (r3_dispatch_add) r3_dispatch_add(\"{literal}\");\n\
         }}\n\
         #ifdef __cplusplus\n\
         }}\n\
         #endif\n\
         #endif\n"
    )
}

/// The header with no table, which the driver writes before clang runs: the host compile
/// includes it whether or not any ptxas run adds a variant.
pub fn empty_header() -> String {
    "/* r3: no variants in this translation unit */\n".to_string()
}

/// Records one architecture's rows and shipped kernels in `dir` and rewrites the header from
/// every part there.
pub fn write_part(
    dir: &Path,
    arch: &str,
    rows: &[Row],
    shipped: &[ShippedKernel],
) -> std::io::Result<()> {
    let lock = std::fs::File::create(dir.join(".dispatch.lock"))?;
    lock.lock()?;
    let part: String = rows
        .iter()
        .map(line)
        .chain(shipped.iter().map(ShippedKernel::line))
        .map(|l| l + "\n")
        .collect();
    crate::store::write_atomic(&dir.join(format!("dispatch-{arch}.txt")), part.as_bytes())?;
    let mut parts: Vec<PathBuf> = std::fs::read_dir(dir)?
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name().is_some_and(|n| {
                let n = n.to_string_lossy();
                n.starts_with("dispatch-") && n.ends_with(".txt")
            })
        })
        .collect();
    parts.sort();
    let mut lines = Vec::new();
    for p in parts {
        lines.extend(std::fs::read_to_string(p)?.lines().map(str::to_owned));
    }
    let text = if lines.is_empty() {
        empty_header()
    } else {
        header(&lines)
    };
    crate::store::write_atomic(&dir.join(HEADER), text.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::candidate::{FoldedArg, Specialize};

    #[test]
    fn a_line_states_the_guard_and_the_header_embeds_the_table_as_one_c_string() {
        let row = Row {
            kernel: "_Z4axpyfPfi".into(),
            arch: "sm_90".into(),
            entry: entry_name("_Z4axpyfPfi", "0123abcd", 1),
            guard: Guard {
                max_threads: Some(256),
                block_x: None,
                values: Some(Specialize {
                    args: vec![FoldedArg::of_bytes(2, &1024u32.to_le_bytes())],
                    block: Some([256, 1, 1]),
                    grid: None,
                }),
            },
        };
        assert_eq!(
            line(&row),
            "v _Z4axpyfPfi sm_90 _Z4axpyfPfi__r3_0123abcd_v1 256 256,1,1 - 0 1 2:00040000"
        );
        let unguarded = Row {
            guard: Guard {
                max_threads: None,
                block_x: None,
                values: None,
            },
            ..row.clone()
        };
        assert!(line(&unguarded).ends_with(" 0 - - 0 0"));
        let h = header(&[line(&row)]);
        assert!(h.contains("r3_dispatch_add(\"r3-dispatch 1\\nv _Z4axpyfPfi sm_90 "));
        assert!(h.contains("#ifndef __CUDA_ARCH__"), "host side only: {h}");
    }

    #[test]
    fn parts_of_several_architectures_make_one_header() {
        let dir = tempfile::tempdir().unwrap();
        let row = |arch: &str| Row {
            kernel: "k".into(),
            arch: arch.into(),
            entry: "k__r3_x_v1".into(),
            guard: Guard {
                max_threads: Some(128),
                block_x: None,
                values: None,
            },
        };
        let shipped = ShippedKernel {
            name: "k".into(),
            arch: "sm_90".into(),
            kernel: "0123abcd0123abcd".into(),
            ptx: vec!["p1".into(), "p2".into()],
        };
        write_part(dir.path(), "sm_90", &[row("sm_90")], &[shipped]).unwrap();
        write_part(dir.path(), "sm_80", &[row("sm_80")], &[]).unwrap();
        let h = std::fs::read_to_string(dir.path().join(HEADER)).unwrap();
        assert!(
            h.contains("\\nv k sm_80 ") && h.contains("\\nv k sm_90 "),
            "{h}"
        );
        assert!(h.contains("\\ns k sm_90 0123abcd0123abcd p1,p2"), "{h}");
        // An architecture whose compile has no variant leaves the others' rows.
        write_part(dir.path(), "sm_80", &[], &[]).unwrap();
        let h = std::fs::read_to_string(dir.path().join(HEADER)).unwrap();
        assert!(!h.contains("sm_80") && h.contains("sm_90"), "{h}");
    }
}
