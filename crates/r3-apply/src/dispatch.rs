//! Variants chosen at launch: the table that tells r3's runtime (`r3rt.c`, linked into every
//! program r3-clang++ links) which extra entries of a kernel exist and when each may run.
//!
//! The shim adds each variant to the PTX as an entry of its own ([`entry_name`]) beside the
//! generic one. The table is worked out before the compile, from the captured IR and the
//! winners (the shim's look ahead, `predicted-<arch>.txt` in the apply directory), and the
//! driver passes clang `-Xarch_host -include<store>/dispatch/<hash>.h`: the header
//! ([`header_text`]) named by its content, which no compile changes or removes, so that a
//! build tool finds the same file the next time and a compiler cache sees the same command.
//! Each ptxas run writes the part of the table it built (`dispatch-<arch>.txt`, empty where it
//! shipped clang's code); where that is not the part included, the driver compiles again with
//! the table that was built. The header is a constructor that hands
//! the table to `r3_dispatch_add`, a weak reference: a program linked without r3's runtime
//! runs the generic code, as does any launch no variant's guard admits.
//!
//! A table line: `v <kernel> <arch> <entry> <max threads or 0> <block x,y,z or -> <grid x,y,z
//! or -> <relaunch block x or 0> <argument count> [<index>:<hex bytes>]...`, in the order a
//! launch tries them. And one line per kernel the compile ships tuned code for (variants or
//! not), `s <kernel> <arch> <kernel hash> <PTX hash>,...` (`store::programs::ShippedKernel`):
//! the runtime takes no decision by it, and a time-only run passes it on, so that r3 knows
//! which code it timed (`store::judge`).
//!
//! The grammar of a line is [`parse_line`]'s, which reads a line exactly as r3rt.c's
//! `parse_line` does (tests/it/dispatch_grammar.rs feeds both the same lines), and the runtime's
//! limits are the `MAX_*` constants here (r3rt.c's `R3_MAX_*`): [`runtime_takes`] says which
//! lines of a table the runtime keeps. Fields are one space apart; numbers are decimal as
//! [`line`] writes them (no sign, no leading zero); a folded argument's bytes are 1 to
//! [`MAX_FOLDED_BYTES`] in lowercase hex. Whether the kernel has the parameter a line folds, of
//! that size, the runtime asks cudart or the driver at launch (or reads the kernel's mangled
//! name, where neither can say): a variant that folds any other never runs.

use crate::candidate::{FoldedArg, Specialize};
use crate::store::programs::ShippedKernel;
use crate::winners::Guard;
use std::path::Path;

/// Variants in all of a program's tables that the runtime keeps (r3rt.c: `R3_MAX_VARIANTS`);
/// a variant line beyond them is skipped.
pub const MAX_VARIANTS: usize = 4096;
/// Variants of one kernel for one architecture that the runtime registers, in table order
/// (`R3_MAX_VARIANTS_PER_KERNEL`); an entry listed twice for one architecture counts once.
pub const MAX_VARIANTS_PER_KERNEL: usize = 4;
/// Folded arguments of one variant (`R3_MAX_FOLDED`).
pub const MAX_FOLDED_ARGS: usize = 16;
/// Bytes of one folded argument, a scalar (`R3_MAX_FOLDED_BYTES`).
pub const MAX_FOLDED_BYTES: usize = 8;
/// The largest parameter index a line may fold (`R3_MAX_PARAM_INDEX`): CUDA passes at most
/// 32764 bytes of parameters.
pub const MAX_PARAM_INDEX: u32 = 32767;
/// The largest N of an architecture `sm_<N>` (`R3_MAX_SM`).
pub const MAX_SM: u32 = 9999;
/// `s` lines in all of a program's tables that the runtime keeps (`R3_MAX_SHIPPED`).
pub const MAX_SHIPPED: usize = 4096;

/// The file name of a header written on its own (a test's, `scripts/bench-dispatch`'s); a
/// build's are kept in the store under their content's hash (`Store::dispatch_header`).
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

/// A table line as the runtime reads it.
#[derive(Debug, Clone, PartialEq)]
pub enum TableLine {
    /// `v ...`: a variant, with the guard the line states (`values` None where it folds no
    /// argument, block or grid).
    Variant(Row),
    /// `s ...`: what a kernel ships, the text after `s `, which the runtime passes on unread.
    Shipped(String),
}

/// Reads one table line (without its newline) as r3rt.c's `parse_line` does: the same lines
/// are taken, with the same fields, and the same refused (the reason is for people). Every
/// line [`line`] writes for a guard within the limits reads back as that row.
pub fn parse_line(l: &str) -> Result<TableLine, String> {
    if let Some(rest) = l.strip_prefix("s ") {
        if !rest.bytes().all(|b| (b' '..=b'~').contains(&b)) {
            return Err("a shipped line of other than printable ASCII".into());
        }
        if rest.is_empty() {
            return Err("an empty shipped line".into());
        }
        return Ok(TableLine::Shipped(rest.to_owned()));
    }
    if l.is_empty() {
        return Err("an empty line".into());
    }
    let f: Vec<&str> = l.split(' ').collect();
    if f.iter().any(|t| t.is_empty()) {
        return Err("an empty field (two spaces, or one at an end)".into());
    }
    if f.len() > 9 + MAX_FOLDED_ARGS {
        return Err("more fields than a variant has".into());
    }
    if f[0] != "v" {
        return Err("neither a variant (v) nor a shipped (s) line".into());
    }
    if f.len() < 9 {
        return Err("fewer fields than a variant has".into());
    }
    let name = |t: &str| t.bytes().all(|b| (b'!'..=b'~').contains(&b));
    if !name(f[1]) || !name(f[3]) {
        return Err("a kernel or entry name of other than printable ASCII".into());
    }
    if arch_sm(f[2]).is_none() {
        return Err(format!("an architecture other than sm_<N>: {}", f[2]));
    }
    let max_threads =
        number(f[4], u32::MAX).ok_or_else(|| format!("max threads is not a number: {}", f[4]))?;
    let block = dims(f[5]).ok_or_else(|| format!("a block other than x,y,z or -: {}", f[5]))?;
    let grid = dims(f[6]).ok_or_else(|| format!("a grid other than x,y,z or -: {}", f[6]))?;
    let block_x = number(f[7], u32::MAX)
        .ok_or_else(|| format!("the relaunch block is not a number: {}", f[7]))?;
    let nargs = number(f[8], MAX_FOLDED_ARGS as u32).ok_or_else(|| {
        format!(
            "the folded argument count is not a number up to {MAX_FOLDED_ARGS}: {}",
            f[8]
        )
    })?;
    if f.len() != 9 + nargs as usize {
        return Err(format!(
            "{nargs} folded arguments stated, {} given",
            f.len() - 9
        ));
    }
    let mut args: Vec<FoldedArg> = Vec::new();
    for t in &f[9..] {
        let a = folded(t).ok_or_else(|| {
            format!(
                "a folded argument other than <index>:<lowercase hex of 1 to {MAX_FOLDED_BYTES} bytes>: {t}"
            )
        })?;
        if args.iter().any(|b| b.index == a.index) {
            return Err(format!("argument {} folded twice", a.index));
        }
        args.push(a);
    }
    let values = (!args.is_empty() || block.is_some() || grid.is_some()).then_some(Specialize {
        args,
        block,
        grid,
    });
    Ok(TableLine::Variant(Row {
        kernel: f[1].to_owned(),
        arch: f[2].to_owned(),
        entry: f[3].to_owned(),
        guard: Guard {
            max_threads: (max_threads > 0).then_some(max_threads),
            block_x: (block_x > 0).then_some(block_x),
            values,
        },
    }))
}

/// The N of an architecture `sm_<N>`, `sm_<N>a` or `sm_<N>f`, as the runtime compares it with
/// a device's compute capability (major × 10 + minor).
pub fn arch_sm(arch: &str) -> Option<u32> {
    let n = arch.strip_prefix("sm_")?;
    let n = n
        .strip_suffix('a')
        .or_else(|| n.strip_suffix('f'))
        .unwrap_or(n);
    number(n, MAX_SM).filter(|&sm| sm > 0)
}

/// A number as [`line`] writes it: decimal digits only, no leading zero, at most `max`.
fn number(t: &str, max: u32) -> Option<u32> {
    let canonical = !t.is_empty()
        && t.len() <= 10
        && t.bytes().all(|b| b.is_ascii_digit())
        && (t == "0" || !t.starts_with('0'));
    if !canonical {
        return None;
    }
    let v: u64 = t.parse().ok()?;
    (v <= u64::from(max)).then_some(v as u32)
}

/// `-`: none; `x,y,z`: each at least 1. None when neither.
fn dims(t: &str) -> Option<Option<[u32; 3]>> {
    if t == "-" {
        return Some(None);
    }
    let d: Vec<u32> = t
        .split(',')
        .map(|p| number(p, u32::MAX).filter(|&v| v > 0))
        .collect::<Option<_>>()?;
    Some(Some(d.try_into().ok()?))
}

/// `<index>:<hex>` with 1 to [`MAX_FOLDED_BYTES`] bytes of lowercase hex.
fn folded(t: &str) -> Option<FoldedArg> {
    let (index, hex) = t.split_once(':')?;
    let index = number(index, MAX_PARAM_INDEX)?;
    let ok = !hex.is_empty()
        && hex.len() % 2 == 0
        && hex.len() / 2 <= MAX_FOLDED_BYTES
        && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
    ok.then(|| FoldedArg {
        index,
        hex: hex.to_owned(),
    })
}

/// For each line of one translation unit's table, whether r3's runtime keeps it, or why not,
/// as r3_dispatch_add and the registration decide: the line must read ([`parse_line`]); a
/// variant line is kept among at most [`MAX_VARIANTS`] (repeats and lines beyond the next limit
/// count too), then registered within [`MAX_VARIANTS_PER_KERNEL`] of its kernel and
/// architecture, an entry listed twice counting once (the repeat is refused here: it adds
/// nothing); an `s` line is kept among at most [`MAX_SHIPPED`]. The program's other tables
/// count against the totals as well, which one compile cannot know.
pub fn runtime_takes(lines: &[String]) -> Vec<Result<(), String>> {
    let (mut listed, mut shipped) = (0, 0);
    let mut registered: Vec<(String, String, String)> = Vec::new();
    let mut take = |l: &String| match parse_line(l)? {
        TableLine::Shipped(_) if shipped == MAX_SHIPPED => Err(format!(
            "more than {MAX_SHIPPED} shipped lines, the most the runtime keeps"
        )),
        TableLine::Shipped(_) => {
            shipped += 1;
            Ok(())
        }
        TableLine::Variant(_) if listed == MAX_VARIANTS => Err(format!(
            "more than {MAX_VARIANTS} variants, the most the runtime keeps"
        )),
        TableLine::Variant(r) => {
            listed += 1;
            let key = (r.kernel, r.arch, r.entry);
            let same = registered
                .iter()
                .filter(|k| k.0 == key.0 && k.1 == key.1)
                .count();
            if registered.contains(&key) {
                Err(format!("{} is listed already for {}", key.2, key.1))
            } else if same == MAX_VARIANTS_PER_KERNEL {
                Err(format!(
                    "{} has {MAX_VARIANTS_PER_KERNEL} variants for {} already, the most the runtime runs",
                    key.0, key.1
                ))
            } else {
                registered.push(key);
                Ok(())
            }
        }
    };
    lines.iter().map(&mut take).collect()
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

/// The header for a table's lines: [`header`], or [`empty_header`] where there are none.
/// Nothing in it depends on the compile but the table, so that one table gives one header
/// (the store keeps it under its content's hash) and an r3 that splices otherwise another.
pub fn header_text(lines: &[String]) -> String {
    let body = if lines.is_empty() {
        empty_header()
    } else {
        header(lines)
    };
    format!("/* r3 {} */\n{body}", env!("CARGO_PKG_VERSION"))
}

/// The parts named `<prefix><arch>.txt` in `dir`, by architecture: each one's lines.
pub fn parts(dir: &Path, prefix: &str) -> std::collections::BTreeMap<String, Vec<String>> {
    let mut out = std::collections::BTreeMap::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(arch) = name
            .strip_prefix(prefix)
            .and_then(|n| n.strip_suffix(".txt"))
        else {
            continue;
        };
        if let Ok(text) = std::fs::read_to_string(e.path()) {
            out.insert(arch.to_owned(), text.lines().map(str::to_owned).collect());
        }
    }
    out
}

/// Every part's lines in one table, the architectures in order.
pub fn table(parts: &std::collections::BTreeMap<String, Vec<String>>) -> Vec<String> {
    parts.values().flatten().cloned().collect()
}

/// The lines of one architecture's part of a table: its rows, then its shipped kernels.
pub fn part_lines(rows: &[Row], shipped: &[ShippedKernel]) -> String {
    rows.iter()
        .map(line)
        .chain(shipped.iter().map(ShippedKernel::line))
        .map(|l| l + "\n")
        .collect()
}

/// Records, in `dir`, the part of the table one architecture's ptxas run built
/// (`dispatch-<arch>.txt`).
pub fn write_part(
    dir: &Path,
    arch: &str,
    rows: &[Row],
    shipped: &[ShippedKernel],
) -> std::io::Result<()> {
    let part = part_lines(rows, shipped);
    crate::store::write_atomic(&dir.join(format!("dispatch-{arch}.txt")), part.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

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

    fn row(entry: &str, max_threads: Option<u32>, values: Option<Specialize>) -> Row {
        Row {
            kernel: "_Z4axpyfPfi".into(),
            arch: "sm_90".into(),
            entry: entry.into(),
            guard: Guard {
                max_threads,
                block_x: None,
                values,
            },
        }
    }

    #[test]
    fn every_line_apply_writes_reads_back_as_its_row() {
        let folds = |args: Vec<FoldedArg>| Specialize {
            args,
            block: Some([256, 1, 1]),
            grid: Some([4, 2, 1]),
        };
        let mut relaunch = row("k__r3_x_v3", Some(128), None);
        relaunch.guard.block_x = Some(128);
        relaunch.arch = "sm_100a".into();
        let rows = [
            row("k__r3_x_v1", Some(256), Some(folds(vec![]))),
            row("k__r3_x_v2", None, None),
            relaunch,
            row(
                "k__r3_x_v4",
                Some(1024),
                Some(folds(vec![
                    FoldedArg::of_bytes(0, &[7]),
                    FoldedArg::of_bytes(3, &u64::MAX.to_le_bytes()),
                    FoldedArg::of_bytes(MAX_PARAM_INDEX, &1.5f32.to_le_bytes()),
                ])),
            ),
        ];
        for r in rows {
            let l = line(&r);
            assert_eq!(parse_line(&l), Ok(TableLine::Variant(r)), "{l}");
        }
        let s = "s k sm_90 0123abcd0123abcd p1,p2";
        assert_eq!(parse_line(s), Ok(TableLine::Shipped(s[2..].to_string())));
    }

    #[test]
    fn a_line_the_runtime_would_misread_is_refused() {
        let good = "v k sm_90 k__r3_x_v1 256 256,1,1 - 0 1 2:00040000";
        assert!(parse_line(good).is_ok());
        for bad in [
            // The probe's cases (issue 56): an index past any parameter list, a sign, text where
            // a number goes, more bytes than any scalar.
            "v k sm_90 e 256 256,1,1 - 0 1 4294967295:00040000",
            "v k sm_90 e 256 256,1,1 - 0 1 -1:00040000",
            "v k sm_90 e abc 256,1,1 - 0 1 2:00040000",
            "v k sm_90 e -1 256,1,1 - 0 1 2:00040000",
            "v k sm_90 e 256 -1,1,1 - 0 1 2:00040000",
            "v k sm_90 e 256 256,1,1 - 0 1 2:00040000000000000000",
            // Not as apply writes it: a plus, a leading zero, uppercase or odd hex, a zero
            // dimension, two spaces, a trailing space, more arguments than stated.
            "v k sm_90 e +256 256,1,1 - 0 1 2:00040000",
            "v k sm_90 e 0256 256,1,1 - 0 1 2:00040000",
            "v k sm_90 e 256 256,1,1 - 0 1 2:0004000A",
            "v k sm_90 e 256 256,1,1 - 0 1 2:00040",
            "v k sm_90 e 256 256,0,1 - 0 1 2:00040000",
            "v k sm_90 e 256 256,1,1,1 - 0 1 2:00040000",
            "v k sm_90  e 256 256,1,1 - 0 1 2:00040000",
            "v k sm_90 e 256 256,1,1 - 0 1 2:00040000 ",
            "v k sm_90 e 256 256,1,1 - 0 1 2:00040000 3:00",
            "v k sm_90 e 256 256,1,1 - 0 2 2:00040000 2:00040000",
            "v k sm_90 e 4294967296 - - 0 0",
            "v k sm_9x e 0 - - 0 0",
            "v k sm_0 e 0 - - 0 0",
            "v k sm_90 e 0 - - 0 17",
            "v k\tx sm_90 e 0 - - 0 0",
            "s ",
            "",
            "x k sm_90 e 0 - - 0 0",
        ] {
            assert!(parse_line(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_runtime_takes_four_variants_per_kernel_and_architecture() {
        let v = |arch: &str, n: usize| format!("v k {arch} k__r3_x_v{n} 0 - - 0 0");
        let mut lines: Vec<String> = (1..=5).map(|n| v("sm_90", n)).collect();
        lines.push(v("sm_80", 1));
        lines.push(v("sm_90", 2));
        lines.push("v k sm_90".into());
        let taken: Vec<bool> = runtime_takes(&lines).iter().map(Result::is_ok).collect();
        assert_eq!(
            taken,
            [true, true, true, true, false, true, false, false],
            "{:?}",
            runtime_takes(&lines)
        );
        let many: Vec<String> = (0..=MAX_VARIANTS).map(|n| v("sm_90", n % 4)).collect();
        let taken = runtime_takes(&many);
        assert!(taken[MAX_VARIANTS - 1].is_err() && taken[MAX_VARIANTS].is_err());
        assert!(taken[MAX_VARIANTS].as_ref().unwrap_err().contains("4096"));
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
        let header_of = || header_text(&table(&parts(dir.path(), "dispatch-")));
        let h = header_of();
        assert!(
            h.contains("\\nv k sm_80 ") && h.contains("\\nv k sm_90 "),
            "{h}"
        );
        assert!(h.contains("\\ns k sm_90 0123abcd0123abcd p1,p2"), "{h}");
        // An architecture whose compile has no variant leaves the others' rows.
        write_part(dir.path(), "sm_80", &[], &[]).unwrap();
        let h = header_of();
        assert!(!h.contains("sm_80") && h.contains("sm_90"), "{h}");
        // No rows at all: the empty header, the same for every compile.
        write_part(dir.path(), "sm_90", &[], &[]).unwrap();
        assert_eq!(header_of(), header_text(&[]));
        assert!(!header_of().contains("r3_dispatch_add"));
    }
}
