//! The MAP-Elites archive: the best variant in each cell of a small feature grid read off the
//! variant's -O3 PTX (share of global-memory instructions, shared memory used, code size), so
//! the loop keeps diverse good variants to build on instead of one line of descent.

use rand::seq::IndexedRandom;
use std::collections::BTreeMap;

/// A variant as the archive keeps it: the attempt that made it (None: the original code), its
/// code (the region's text) and its speedup over the original's best compiler-only
/// configuration (None until measured).
#[derive(Debug, Clone, PartialEq)]
pub struct Elite {
    pub attempt: Option<u32>,
    pub code: String,
    pub speedup: Option<f64>,
}

#[derive(Debug, Clone, Default)]
pub struct Archive {
    cells: BTreeMap<String, Elite>,
}

/// The cell of a PTX text.
pub fn cell(ptx: &str) -> String {
    let stats = crate::ptx::stats::stats(ptx);
    let n = stats.instructions.max(1);
    let global = ptx
        .lines()
        .map(str::trim_start)
        .filter(|l| {
            ["ld.global", "st.global", "atom.global", "red.global"]
                .iter()
                .any(|op| l.starts_with(op))
        })
        .count();
    let share = global as f64 / n as f64;
    let mem = [0.05, 0.10, 0.20].iter().filter(|&&t| share >= t).count();
    let smem = ptx.contains(".shared") as u8;
    let size = usize::BITS - n.leading_zeros();
    format!("mem{mem}/smem{smem}/size{size}")
}

impl Archive {
    /// Keeps `e` in `cell` if the cell is empty or `e` is faster (a measured variant beats an
    /// unmeasured one; a failed variant never enters).
    pub fn offer(&mut self, cell: &str, e: Elite) -> bool {
        let better = match self.cells.get(cell) {
            None => true,
            Some(old) => match (e.speedup, old.speedup) {
                (Some(a), Some(b)) => a > b,
                (Some(_), None) => true,
                _ => false,
            },
        };
        if better {
            self.cells.insert(cell.to_owned(), e);
        }
        better
    }

    /// The elites in a random order: parents to try, the first first.
    pub fn shuffled(&self, rng: &mut impl rand::Rng) -> Vec<Elite> {
        let all: Vec<&Elite> = self.cells.values().collect();
        all.choose_multiple(rng, all.len())
            .map(|e| (*e).clone())
            .collect()
    }

    pub fn len(&self) -> usize {
        self.cells.len()
    }

    pub fn is_empty(&self) -> bool {
        self.cells.is_empty()
    }

    pub fn cells(&self) -> impl Iterator<Item = (&String, &Elite)> {
        self.cells.iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(a: u32, s: Option<f64>) -> Elite {
        Elite {
            attempt: Some(a),
            code: String::new(),
            speedup: s,
        }
    }

    #[test]
    fn a_cell_keeps_its_fastest_variant() {
        let mut a = Archive::default();
        assert!(a.offer("c", e(1, None)));
        assert!(a.offer("c", e(2, Some(1.1))));
        assert!(!a.offer("c", e(3, Some(1.0))));
        assert!(!a.offer("c", e(4, None)));
        assert!(a.offer("d", e(5, Some(0.5))));
        assert_eq!(a.len(), 2);
        assert_eq!(a.cells().next().unwrap().1.attempt, Some(2));
    }

    #[test]
    fn cells_tell_memory_bound_code_from_compute_bound_code() {
        let body = |mem: usize, alu: usize| {
            let mut s = String::from(".visible .entry k()\n{\n");
            s += &"ld.global.f32 %f1, [%rd1];\n".repeat(mem);
            s += &"add.f32 %f1, %f1, %f1;\n".repeat(alu);
            s + "ret;\n}\n"
        };
        assert_ne!(cell(&body(5, 5)), cell(&body(1, 60)));
        assert_eq!(cell(&body(5, 5)), cell(&body(6, 5)));
    }
}
