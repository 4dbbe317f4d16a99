//! Apply: the tuned kernels go into the user's build. `plan` chooses what ships of each kernel
//! (from the store's trials or an exported winners file): the generic code and guarded
//! variants. `shim` stands in for ptxas inside clang's device compile and splices the winners'
//! PTX over clang's (`splice`), so that every kernel without a winner is exactly what clang
//! produced, adds the variants as entries of their own, and writes the table r3's runtime
//! chooses them by (`dispatch`); `formats` writes winners and trials for other tools (T4,
//! Proteus). The driver (`driver::apply`) sets it up.

use r3_ir as ir;
use r3_ir::lower;
use r3_kernel as kernel;
use r3_passes::candidate;
use r3_store as store;

pub mod check;
pub mod dispatch;
pub mod formats;
pub mod plan;
pub mod shim;
pub mod splice;
pub mod winners;
