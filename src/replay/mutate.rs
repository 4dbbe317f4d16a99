//! Deliberately broken code, for proving that replay catches what it must: applied to a
//! candidate's IR after its pipeline, before code generation. Test-only by design: exposed as
//! `r3 replay --mutate`, never used by the search.

use inkwell::builder::Builder;
use inkwell::module::Module;
use inkwell::values::{BasicValueEnum, FunctionValue, InstructionOpcode, InstructionValue};

#[derive(
    Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "kebab-case")]
pub enum Mutation {
    /// Delete the kernel's last store.
    DropStore,
    /// Store a value that differs by one (as if a constant were wrong).
    ChangeConstant,
    /// Write far outside any allocation first thing in the kernel.
    OobWrite,
    /// Spin forever at the kernel's start.
    EndlessLoop,
}

/// Applies the mutation to the module's kernel; false when the kernel has nothing to mutate.
pub fn apply(module: &Module, m: Mutation) -> bool {
    let Some(kernel) = module.get_functions().find(|f| {
        f.get_call_conventions() == crate::ir::PTX_KERNEL_CC && f.count_basic_blocks() > 0
    }) else {
        return false;
    };
    let b = module.get_context().create_builder();
    match m {
        Mutation::DropStore => last_store(kernel)
            .map(|s| s.erase_from_basic_block())
            .is_some(),
        Mutation::ChangeConstant => last_store(kernel).is_some_and(|s| bump_stored_value(&b, s)),
        Mutation::OobWrite => oob_write(module, &b, kernel),
        Mutation::EndlessLoop => endless_loop(module, &b, kernel),
    }
}

fn instructions(f: FunctionValue) -> impl Iterator<Item = InstructionValue> {
    f.get_basic_blocks()
        .into_iter()
        .flat_map(|bb| bb.get_instructions())
}

fn last_store(f: FunctionValue) -> Option<InstructionValue> {
    instructions(f)
        .filter(|i| i.get_opcode() == InstructionOpcode::Store)
        .last()
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
        BasicValueEnum::FloatValue(v) => b
            .build_float_add(v, v.get_type().const_float(1.0), "r3.bump")
            .unwrap()
            .into(),
        _ => return false,
    };
    store.set_operand(0, bumped)
}

fn first_pointer_param(f: FunctionValue) -> Option<inkwell::values::PointerValue> {
    f.get_param_iter()
        .find_map(|p| p.is_pointer_value().then(|| p.into_pointer_value()))
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
