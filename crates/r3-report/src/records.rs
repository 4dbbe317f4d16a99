//! The recordings a run made, one line each.

use crate::kernel::demangle;
use crate::store::records::Recording;
use std::path::Path;

pub fn render(recs: &[Recording], store: &Path) -> String {
    let mut out = format!(
        "r3: {} launch(es) recorded in {}\n",
        recs.len(),
        store.display()
    );
    for r in recs {
        let l = &r.launch;
        let state = match &l.not_replayable {
            Some(why) => format!("not replayable: {why}"),
            None => format!(
                "{} regions, {:.1} MiB in, {:.1} MiB changed, {:.3} ms in app",
                l.regions,
                l.bytes_in as f64 / 1048576.0,
                l.bytes_changed as f64 / 1048576.0,
                l.in_app_ms
            ),
        };
        out += &format!(
            "  {}  {}  grid {:?} block {:?}  {}\n",
            r.id,
            demangle(&l.kernel),
            l.grid,
            l.block,
            state
        );
    }
    out
}
