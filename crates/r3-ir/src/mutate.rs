//! Deliberately broken code, for proving that replay catches what it must: applied to a
//! candidate's IR after its pipeline, before code generation. Test-only by design: exposed as
//! `r3 replay --mutate` (and `scripts/bench-safety`), never used by the search. Each kind is a
//! fault that a miscompile or a bad pass order could make; each changes what the kernel does
//! wherever it runs, so replay must see it as wrong output, a crash or a hang.

use inkwell::builder::Builder;
use inkwell::module::Module;
use inkwell::values::{
    BasicValue as _, BasicValueEnum, FunctionValue, InstructionOpcode, InstructionValue,
};
use inkwell::IntPredicate;

/// The enum, its list and its names from one table, so that a fault added is a fault listed
/// and named (no clap here: the command line's parser is the top crate's, ARCHITECTURE.md).
macro_rules! mutations {
    ($($(#[doc = $doc:literal])* $variant:ident = $name:literal,)*) => {
        #[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
        #[serde(rename_all = "kebab-case")]
        pub enum Mutation {
            $($(#[doc = $doc])* $variant,)*
        }

        impl Mutation {
            /// Every fault, in the order of the table.
            pub const ALL: &'static [Mutation] = &[$(Mutation::$variant,)*];

            /// The fault's name on the command line (`--mutate drop-store`), the one serde writes.
            pub fn name(self) -> &'static str {
                match self {
                    $(Mutation::$variant => $name,)*
                }
            }
        }
    };
}

mutations! {
    /// Delete the kernel's stores. (Store faults change every store: one that only a path the
    /// recorded input never takes would reach proves nothing about replay.)
    DropStore = "drop-store",
    /// Store values that are off (integers by one, floats by half and one), as if a constant
    /// were wrong.
    ChangeConstant = "change-constant",
    /// Stores write the element after the one they should (an index off by one).
    OffByOne = "off-by-one",
    /// The kernel's first integer comparison gives the opposite answer (a flipped predicate).
    FlipPredicate = "flip-predicate",
    /// The last non-commutative arithmetic (a - b, a / b, a << b, ...) has its operands swapped
    /// (a float one where the kernel has any).
    SwapOperands = "swap-operands",
    /// Floats stored are off by 1e-3 of themselves: a reassociation whose error exceeds the
    /// usual tolerances.
    FloatError = "float-error",
    /// Every thread writes a word just past the end of an output allocation first thing
    /// (needs the recording: replay passes the address).
    PastEnd = "past-end",
    /// Every barrier (`__syncthreads`) removed: a data race wherever threads share memory.
    DropBarrier = "drop-barrier",
    /// Floats stored are off by 2^-20 of themselves or not, as the low bit of the SM's clock
    /// falls: inside usual tolerances, but different from run to run, as a race whose effect
    /// stays small would be (what only a determinism check sees).
    Jitter = "jitter",
    /// Write far outside any allocation first thing in the kernel (an illegal address, which
    /// also leaves the CUDA context unusable).
    OobWrite = "oob-write",
    /// Spin forever at the kernel's start.
    EndlessLoop = "endless-loop",
    /// Trap (abort the kernel) first thing.
    Trap = "trap",
    /// Define a 256 GiB `__device__` array, more memory than any GPU has (out of memory).
    OutOfMemory = "out-of-memory",
}

/// `--mutate drop-store`: a fault by its name.
impl std::str::FromStr for Mutation {
    type Err = String;

    fn from_str(s: &str) -> Result<Mutation, String> {
        Mutation::ALL
            .iter()
            .copied()
            .find(|m| m.name() == s)
            .ok_or_else(|| {
                let names: Vec<&str> = Mutation::ALL.iter().map(|m| m.name()).collect();
                format!(
                    "no fault '{s}'; fix: one of {} (docs/measurement.md says what each does)",
                    names.join(", ")
                )
            })
    }
}

/// Where a mutation needs facts of the recording it will run on.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Facts {
    /// The first byte past an allocation the launch writes (`PastEnd`).
    pub past_end: Option<u64>,
}

/// Applies the mutation to the module's kernel; false when the kernel has nothing to mutate.
pub fn apply(module: &Module, m: Mutation, facts: Facts) -> bool {
    let Some(kernel) = module
        .get_functions()
        .find(|f| f.get_call_conventions() == crate::PTX_KERNEL_CC && f.count_basic_blocks() > 0)
    else {
        return false;
    };
    let b = module.get_context().create_builder();
    match m {
        Mutation::DropStore => each_store(kernel, |s| {
            s.erase_from_basic_block();
            true
        }),
        Mutation::ChangeConstant => each_store(kernel, |s| bump_stored_value(&b, s)),
        Mutation::OffByOne => each_store(kernel, |s| off_by_one(module, &b, s)),
        Mutation::FlipPredicate => flip_first_icmp(&b, kernel),
        Mutation::SwapOperands => swap_last_noncommutative(kernel),
        Mutation::FloatError => each_store(kernel, |s| scale_stored(&b, s)),
        Mutation::PastEnd => facts
            .past_end
            .is_some_and(|addr| store_past_end(module, &b, kernel, addr)),
        Mutation::DropBarrier => drop_barriers(kernel),
        Mutation::Jitter => each_store(kernel, |s| jitter_stored(module, &b, s)),
        Mutation::OobWrite => oob_write(module, &b, kernel),
        Mutation::EndlessLoop => endless_loop(module, &b, kernel),
        Mutation::Trap => trap_first(module, &b, kernel),
        Mutation::OutOfMemory => huge_global(module, &b, kernel),
    }
}

fn instructions(f: FunctionValue) -> impl Iterator<Item = InstructionValue> {
    f.get_basic_blocks()
        .into_iter()
        .flat_map(|bb| bb.get_instructions())
}

/// Applies `change` to every store of the kernel (all of them, so that the fault is where the
/// kernel's work is, whatever path the recorded input takes); true if it changed any.
fn each_store(f: FunctionValue, mut change: impl FnMut(InstructionValue) -> bool) -> bool {
    let stores: Vec<InstructionValue> = instructions(f)
        .filter(|i| i.get_opcode() == InstructionOpcode::Store)
        .collect();
    let mut changed = false;
    for s in stores {
        changed |= change(s);
    }
    changed
}

fn bump_stored_value(b: &Builder, store: InstructionValue) -> bool {
    let Some(value) = store.get_operand(0).and_then(|o| o.value()) else {
        return false;
    };
    b.position_before(&store);
    let bumped: BasicValueEnum = match value {
        BasicValueEnum::IntValue(v) => b
            .build_int_add(v, v.get_type().const_int(1, false), "r3.bump")
            .unwrap()
            .into(),
        // Relative for floats: +1 on a large sum would be inside any tolerance.
        BasicValueEnum::FloatValue(v) => {
            let t = v.get_type();
            let scaled = b
                .build_float_mul(v, t.const_float(1.5), "r3.scaled")
                .unwrap();
            b.build_float_add(scaled, t.const_float(1.0), "r3.bump")
                .unwrap()
                .into()
        }
        _ => return false,
    };
    store.set_operand(0, bumped)
}

/// The first pointer the kernel is passed (not a struct passed by value, which lives in the
/// parameter space and is no device address).
fn first_pointer_param(f: FunctionValue) -> Option<inkwell::values::PointerValue> {
    use inkwell::attributes::{Attribute, AttributeLoc};
    let byval = Attribute::get_named_enum_kind_id("byval");
    f.get_param_iter().enumerate().find_map(|(i, p)| {
        let by_value = f
            .get_enum_attribute(AttributeLoc::Param(i as u32), byval)
            .is_some();
        (p.is_pointer_value() && !by_value).then(|| p.into_pointer_value())
    })
}

fn oob_write(module: &Module, b: &Builder, f: FunctionValue) -> bool {
    let Some(p) = first_pointer_param(f) else {
        return false;
    };
    let ctx = module.get_context();
    let entry = f.get_first_basic_block().unwrap();
    b.position_before(&entry.get_first_instruction().unwrap());
    let i8t = ctx.i8_type();
    // SAFETY (IR, not Rust): the point of this mutation is an out-of-bounds address.
    let far = unsafe {
        b.build_gep(
            i8t,
            p,
            &[ctx.i64_type().const_int(1 << 40, false)],
            "r3.far",
        )
        .unwrap()
    };
    let st = b
        .build_store(far, ctx.i32_type().const_int(7, false))
        .unwrap();
    st.set_volatile(true).is_ok()
}

fn endless_loop(module: &Module, b: &Builder, f: FunctionValue) -> bool {
    use inkwell::attributes::{Attribute, AttributeLoc};
    let Some(p) = first_pointer_param(f) else {
        return false;
    };
    let ctx = module.get_context();
    for a in ["mustprogress", "willreturn"] {
        f.remove_enum_attribute(AttributeLoc::Function, Attribute::get_named_enum_kind_id(a));
    }
    // Every return becomes a jump into a loop that never ends (a volatile store keeps it).
    let spin = ctx.append_basic_block(f, "r3.spin");
    b.position_at_end(spin);
    let st = b
        .build_store(p, ctx.i32_type().const_int(0, false))
        .unwrap();
    let _ = st.set_volatile(true);
    b.build_unconditional_branch(spin).unwrap();
    let rets: Vec<InstructionValue> = instructions(f)
        .filter(|i| i.get_opcode() == InstructionOpcode::Return)
        .collect();
    for ret in &rets {
        b.position_before(ret);
        b.build_unconditional_branch(spin).unwrap();
        ret.erase_from_basic_block();
    }
    !rets.is_empty()
}

fn stored_value(store: InstructionValue) -> Option<BasicValueEnum> {
    store.get_operand(0).and_then(|o| o.value())
}

fn off_by_one(module: &Module, b: &Builder, store: InstructionValue) -> bool {
    let (Some(value), Some(BasicValueEnum::PointerValue(ptr))) = (
        stored_value(store),
        store.get_operand(1).and_then(|o| o.value()),
    ) else {
        return false;
    };
    b.position_before(&store);
    let i64t = module.get_context().i64_type();
    // SAFETY (IR, not Rust): the point of this mutation is the neighbouring element.
    let next = unsafe {
        b.build_gep(
            value.get_type(),
            ptr,
            &[i64t.const_int(1, false)],
            "r3.next",
        )
        .unwrap()
    };
    store.set_operand(1, next)
}

fn inverse(p: IntPredicate) -> IntPredicate {
    use IntPredicate::*;
    match p {
        EQ => NE,
        NE => EQ,
        UGT => ULE,
        UGE => ULT,
        ULT => UGE,
        ULE => UGT,
        SGT => SLE,
        SGE => SLT,
        SLT => SGE,
        SLE => SGT,
    }
}

fn flip_first_icmp(b: &Builder, f: FunctionValue) -> bool {
    let Some(cmp) = instructions(f).find(|i| i.get_opcode() == InstructionOpcode::ICmp) else {
        return false;
    };
    let operands = (
        cmp.get_operand(0).and_then(|o| o.value()),
        cmp.get_operand(1).and_then(|o| o.value()),
    );
    let (Some(pred), (Some(BasicValueEnum::IntValue(l)), Some(BasicValueEnum::IntValue(r)))) =
        (cmp.get_icmp_predicate(), operands)
    else {
        return false;
    };
    b.position_before(&cmp);
    let flipped = b.build_int_compare(inverse(pred), l, r, "r3.flip").unwrap();
    cmp.replace_all_uses_with(&flipped.as_instruction_value().unwrap());
    cmp.erase_from_basic_block();
    true
}

fn swap_last_noncommutative(f: FunctionValue) -> bool {
    use InstructionOpcode::*;
    let swappable = |i: &InstructionValue| {
        matches!(
            i.get_opcode(),
            Sub | FSub | SDiv | UDiv | FDiv | SRem | URem | Shl | LShr | AShr
        ) && i.get_operand(0).and_then(|o| o.value()) != i.get_operand(1).and_then(|o| o.value())
    };
    let float = |i: &InstructionValue| matches!(i.get_opcode(), FSub | FDiv);
    let all: Vec<InstructionValue> = instructions(f).filter(swappable).collect();
    let Some(op) = all.iter().rev().find(|i| float(i)).or(all.last()).copied() else {
        return false;
    };
    let (Some(a), Some(c)) = (
        op.get_operand(0).and_then(|o| o.value()),
        op.get_operand(1).and_then(|o| o.value()),
    ) else {
        return false;
    };
    op.set_operand(0, c) && op.set_operand(1, a)
}

fn scale_stored(b: &Builder, store: InstructionValue) -> bool {
    let Some(BasicValueEnum::FloatValue(v)) = stored_value(store) else {
        return false;
    };
    b.position_before(&store);
    let off = b
        .build_float_mul(v, v.get_type().const_float(1.0 + 1e-3), "r3.err")
        .unwrap();
    store.set_operand(0, off)
}

fn jitter_stored(module: &Module, b: &Builder, store: InstructionValue) -> bool {
    let Some(BasicValueEnum::FloatValue(v)) = stored_value(store) else {
        return false;
    };
    let Some(clock) = inkwell::intrinsics::Intrinsic::find("llvm.nvvm.read.ptx.sreg.clock")
        .and_then(|c| c.get_declaration(module, &[]))
    else {
        return false;
    };
    b.position_before(&store);
    let t = v.get_type();
    let ticks = b.build_call(clock, &[], "r3.clock").unwrap();
    let ticks = ticks.try_as_basic_value().basic().unwrap().into_int_value();
    let bit = b
        .build_and(ticks, ticks.get_type().const_int(1, false), "r3.bit")
        .unwrap();
    let bit = b.build_unsigned_int_to_float(bit, t, "r3.bitf").unwrap();
    let factor = b
        .build_float_add(
            b.build_float_mul(bit, t.const_float(2f64.powi(-20)), "r3.eps")
                .unwrap(),
            t.const_float(1.0),
            "r3.factor",
        )
        .unwrap();
    let off = b.build_float_mul(v, factor, "r3.jitter").unwrap();
    store.set_operand(0, off)
}

fn store_past_end(module: &Module, b: &Builder, f: FunctionValue, addr: u64) -> bool {
    let ctx = module.get_context();
    let entry = f.get_first_basic_block().unwrap();
    b.position_before(&entry.get_first_instruction().unwrap());
    let at = b
        .build_int_to_ptr(
            ctx.i64_type().const_int(addr, false),
            ctx.ptr_type(inkwell::AddressSpace::default()),
            "r3.past",
        )
        .unwrap();
    let st = b
        .build_store(at, ctx.i32_type().const_int(0x7fc0_0001, false))
        .unwrap();
    st.set_volatile(true).is_ok()
}

fn drop_barriers(f: FunctionValue) -> bool {
    let barriers: Vec<InstructionValue> = instructions(f)
        .filter(|i| i.get_opcode() == InstructionOpcode::Call)
        .filter(|i| {
            let callee = i.get_operand(i.get_num_operands() - 1);
            callee
                .and_then(|o| o.value())
                .is_some_and(|v| v.get_name().to_bytes().starts_with(b"llvm.nvvm.barrier"))
        })
        // A reducing barrier whose result is used (`__syncthreads_or` in CUB's radix sort)
        // stays: erased, it would leave its uses dangling, and LLVM crashes on that module.
        .filter(|i| i.get_first_use().is_none())
        .collect();
    barriers.iter().for_each(|i| i.erase_from_basic_block());
    !barriers.is_empty()
}

fn trap_first(module: &Module, b: &Builder, f: FunctionValue) -> bool {
    let Some(trap) = inkwell::intrinsics::Intrinsic::find("llvm.trap")
        .and_then(|t| t.get_declaration(module, &[]))
    else {
        return false;
    };
    let entry = f.get_first_basic_block().unwrap();
    b.position_before(&entry.get_first_instruction().unwrap());
    b.build_call(trap, &[], "").is_ok()
}

/// A 256 GiB global array the kernel writes (so that it stays): loading the module must
/// allocate it.
fn huge_global(module: &Module, b: &Builder, f: FunctionValue) -> bool {
    let ctx = module.get_context();
    let gib = ctx.i8_type().array_type(1 << 30);
    let huge = module.add_global(
        gib.array_type(256),
        Some(inkwell::AddressSpace::from(1u16)),
        "r3.huge",
    );
    huge.set_initializer(&gib.array_type(256).const_zero());
    huge.set_linkage(inkwell::module::Linkage::Internal);
    let entry = f.get_first_basic_block().unwrap();
    b.position_before(&entry.get_first_instruction().unwrap());
    let st = b
        .build_store(huge.as_pointer_value(), ctx.i8_type().const_int(1, false))
        .unwrap();
    st.set_volatile(true).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A block-sum kernel with what every mutation looks for: a bounds check, a division, a
    /// barrier, float stores through a pointer argument.
    const KERNEL: &str = r#"
target triple = "nvptx64-nvidia-cuda"
define ptx_kernel void @k(ptr addrspace(1) %in, ptr addrspace(1) %out, i32 %n) {
entry:
  %tid = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()
  %inb = icmp slt i32 %tid, %n
  br i1 %inb, label %body, label %exit
body:
  %i = sext i32 %tid to i64
  %p = getelementptr float, ptr addrspace(1) %in, i64 %i
  %x = load float, ptr addrspace(1) %p
  %h = fdiv float %x, 3.0
  %q = getelementptr float, ptr addrspace(1) %out, i64 %i
  store float %h, ptr addrspace(1) %q
  call void @llvm.nvvm.barrier.cta.sync.aligned.all(i32 0)
  %back = sub i32 %n, %tid
  %j = sext i32 %back to i64
  %r = getelementptr float, ptr addrspace(1) %out, i64 %j
  %y = load float, ptr addrspace(1) %r
  %z = fsub float %y, %h
  store float %z, ptr addrspace(1) %q
  br label %exit
exit:
  ret void
}
declare i32 @llvm.nvvm.read.ptx.sreg.tid.x()
declare void @llvm.nvvm.barrier.cta.sync.aligned.all(i32)
"#;

    fn mutated(m: Mutation, facts: Facts) -> Option<String> {
        let ctx = inkwell::context::Context::create();
        let buf = inkwell::memory_buffer::MemoryBuffer::create_from_memory_range_copy(
            KERNEL.as_bytes(),
            "k",
        );
        let module = ctx.create_module_from_ir(buf).unwrap();
        let before = module.print_to_string().to_string();
        if !apply(&module, m, facts) {
            return None;
        }
        module
            .verify()
            .unwrap_or_else(|e| panic!("{m:?} leaves invalid IR: {e}"));
        let after = module.print_to_string().to_string();
        assert_ne!(before, after, "{m:?} changed nothing");
        Some(after)
    }

    /// A fault's name is serde's kebab-case name, parses back to the fault, and is unique; an
    /// unknown name is refused with the list.
    #[test]
    fn fault_names_are_serdes_and_parse_back() {
        let mut seen = std::collections::HashSet::new();
        for m in Mutation::ALL {
            assert_eq!(
                serde_json::to_string(m).unwrap(),
                format!("\"{}\"", m.name())
            );
            assert_eq!(m.name().parse::<Mutation>(), Ok(*m));
            assert!(seen.insert(m.name()), "{} twice", m.name());
        }
        assert_eq!(seen.len(), 13);
        let e = "drop-stores".parse::<Mutation>().unwrap_err();
        assert!(
            e.contains("'drop-stores'")
                && e.contains("drop-store, change-constant")
                && e.contains("out-of-memory"),
            "{e}"
        );
    }

    #[test]
    fn every_mutation_changes_the_kernel_and_leaves_valid_ir() {
        let facts = Facts {
            past_end: Some(0x7000_0000_1000),
        };
        for m in Mutation::ALL {
            let ir = mutated(*m, facts).unwrap_or_else(|| panic!("{m:?} found nothing"));
            let has = |s: &str| ir.contains(s);
            let ok = match m {
                Mutation::DropStore => !has("store "),
                Mutation::ChangeConstant => has("r3.bump"),
                Mutation::OffByOne => has("r3.next"),
                Mutation::FlipPredicate => has("icmp sge i32 %tid, %n"),
                Mutation::SwapOperands => has("fsub float %h, %y"),
                Mutation::FloatError => has("r3.err"),
                Mutation::PastEnd => has("inttoptr (i64 123145302315008 to ptr)"),
                Mutation::DropBarrier => !has("call void @llvm.nvvm.barrier"),
                Mutation::Jitter => has("@llvm.nvvm.read.ptx.sreg.clock()") && has("r3.jitter"),
                Mutation::OobWrite => has("r3.far"),
                Mutation::EndlessLoop => has("r3.spin"),
                Mutation::Trap => has("call void @llvm.trap()"),
                Mutation::OutOfMemory => has("[256 x [1073741824 x i8]]"),
            };
            assert!(ok, "{m:?}:\n{ir}");
        }
    }

    #[test]
    fn a_mutation_without_what_it_needs_says_so() {
        assert!(mutated(Mutation::PastEnd, Facts::default()).is_none());
    }
}
