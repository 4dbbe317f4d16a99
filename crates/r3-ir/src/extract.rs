//! Splitting a translation unit's device module into one module per kernel: the kernel plus
//! every function and global it reaches (device functions, `__constant__` and `__device__`
//! variables, libdevice code), named by a hash of its content.

use super::{verify, IrError, PTX_KERNEL_CC};
use crate::kernel::{
    demangle, Field, KernelModule, KernelSignature, Param, SourceLoc, StructLayout,
};
use inkwell::context::Context;
use inkwell::module::Module;
use inkwell::values::{AsValueRef, FunctionValue};
use llvm_sys::core::*;
use llvm_sys::debuginfo::*;
use llvm_sys::prelude::*;
use llvm_sys::target::*;
use std::collections::HashSet;
use std::ffi::CStr;

/// Kernels defined in the module (`ptx_kernel` calling convention).
pub fn kernels<'c>(module: &Module<'c>) -> Vec<FunctionValue<'c>> {
    module
        .get_functions()
        .filter(|f| f.count_basic_blocks() > 0 && f.get_call_conventions() == PTX_KERNEL_CC)
        .collect()
}

/// One module per kernel of `tu`, each passing the verifier. `what` names the TU in errors.
pub fn split(tu: &Module, what: &str) -> Result<Vec<KernelModule>, IrError> {
    let shared = shared_in_unit(tu);
    kernels(tu)
        .into_iter()
        .map(|f| {
            let name = f.get_name().to_string_lossy().into_owned();
            extract_one(tu, &name, &shared, &format!("{what}: kernel {name}"))
        })
        .collect()
}

fn extract_one(
    tu: &Module,
    name: &str,
    shared: &HashSet<String>,
    what: &str,
) -> Result<KernelModule, IrError> {
    let kernel = tu
        .get_function(name)
        .expect("kernel listed from this module");
    let source = source_loc(kernel);
    let arch = string_attr(kernel, "target-cpu").unwrap_or_default();
    let unoptimized = has_attr(kernel, "optnone");
    let module = tu.clone();
    let f = module.get_function(name).expect("clone has the kernel");
    keep_only_reachable(&module, f);
    share_variables(&module, shared);
    // SAFETY: the module is valid and owned by us.
    unsafe { LLVMStripModuleDebugInfo(module.as_mut_ptr()) };
    let signature = KernelSignature {
        name: name.to_owned(),
        demangled: demangle(name),
        arch,
        params: Vec::new(),
        source,
        unoptimized,
    };
    match without_debug_version_flag(&module) {
        // A fresh context: parsing into the TU's own would rename its struct types.
        Some(text) => finish(
            &parse_text(&Context::create(), &text, what)?,
            signature,
            what,
        ),
        None => finish(&module, signature, what),
    }
}

/// Normalizes, verifies and hashes a kernel's own module, and reads its parameters.
fn finish(
    module: &Module,
    mut signature: KernelSignature,
    what: &str,
) -> Result<KernelModule, IrError> {
    let name = signature.name.clone();
    normalize(module, &name);
    verify(module, what)?;
    let text = module.print_to_string().to_string();
    let hash = crate::kernel::KernelHash::of_module_text(&text);
    let bitcode = module.write_bitcode_to_memory().as_slice().to_vec();
    let f = module
        .get_function(&name)
        .expect("kernel survives extraction");
    signature.params = params(module, f);
    Ok(KernelModule {
        hash,
        bitcode,
        signature,
    })
}

/// Stripping debug info leaves its "Debug Info Version" module flag, so the same kernel built
/// with and without `-g` would differ. The C API cannot remove a flag: this gives the module's
/// text without it, or None when it has none.
fn without_debug_version_flag(module: &Module) -> Option<String> {
    const FLAG: &str = "!\"Debug Info Version\"";
    let text = module.print_to_string().to_string();
    let def = text
        .lines()
        .find(|l| l.starts_with('!') && l.contains(FLAG))?;
    let id = def.split(' ').next().unwrap_or_default();
    let kept: Vec<String> = text
        .lines()
        .filter(|l| *l != def)
        .map(|l| match l.strip_prefix("!llvm.module.flags = !{") {
            Some(list) => {
                let ids: Vec<&str> = list
                    .trim_end_matches('}')
                    .split(", ")
                    .filter(|x| *x != id)
                    .collect();
                format!("!llvm.module.flags = !{{{}}}", ids.join(", "))
            }
            None => l.to_owned(),
        })
        .collect();
    Some(kept.join("\n"))
}

fn parse_text<'c>(ctx: &'c Context, text: &str, what: &str) -> Result<Module<'c>, IrError> {
    let buf =
        inkwell::memory_buffer::MemoryBuffer::create_from_memory_range_copy(text.as_bytes(), what);
    ctx.create_module_from_ir(buf).map_err(|e| IrError::Parse {
        what: what.to_owned(),
        msg: e.to_string(),
    })
}

/// Module-level names that differ between builds of the same kernel, and the source
/// locations clang attaches to inline assembly (`!srcloc`): offsets into all it has read,
/// which move with the length of any path a macro spells out (`__FILE__` in an assertion of a
/// header), so that CUB's kernels built from a checkout at another path were other kernels.
fn normalize(module: &Module, kernel: &str) {
    module.set_name(kernel);
    module.set_source_file_name("");
    // SAFETY: walking and editing instructions of a module we own.
    unsafe {
        let m = module.as_mut_ptr();
        let kind = LLVMGetMDKindIDInContext(LLVMGetModuleContext(m), c"srcloc".as_ptr(), 6);
        for f in iter(LLVMGetFirstFunction(m), |f| LLVMGetNextFunction(f)) {
            for b in iter(LLVMGetFirstBasicBlock(f), |b| LLVMGetNextBasicBlock(b)) {
                for i in iter(LLVMGetFirstInstruction(b), |i| LLVMGetNextInstruction(i)) {
                    if !LLVMGetMetadata(i, kind).is_null() {
                        LLVMSetMetadata(i, kind, std::ptr::null_mut());
                    }
                }
            }
        }
    }
}

fn string_attr(f: FunctionValue, key: &str) -> Option<String> {
    use inkwell::attributes::AttributeLoc;
    f.get_string_attribute(AttributeLoc::Function, key)
        .map(|a| a.get_string_value().to_string_lossy().into_owned())
}

fn has_attr(f: FunctionValue, name: &str) -> bool {
    use inkwell::attributes::{Attribute, AttributeLoc};
    let kind = Attribute::get_named_enum_kind_id(name);
    f.get_enum_attribute(AttributeLoc::Function, kind).is_some()
}

fn source_loc(f: FunctionValue) -> Option<SourceLoc> {
    // SAFETY: reading debug metadata of a live function; every pointer is checked for null.
    unsafe {
        let sp = LLVMGetSubprogram(f.as_value_ref());
        if sp.is_null() {
            return None;
        }
        let file = LLVMDIScopeGetFile(sp);
        if file.is_null() {
            return None;
        }
        let (mut dlen, mut flen) = (0u32, 0u32);
        let dir = lossy(LLVMDIFileGetDirectory(file, &mut dlen), dlen);
        let name = lossy(LLVMDIFileGetFilename(file, &mut flen), flen);
        let path = if name.starts_with('/') || dir.is_empty() {
            name
        } else {
            format!("{dir}/{name}")
        };
        Some(SourceLoc {
            file: path,
            line: LLVMDISubprogramGetLine(sp),
        })
    }
}

unsafe fn lossy(ptr: *const std::ffi::c_char, len: u32) -> String {
    if ptr.is_null() {
        return String::new();
    }
    let bytes = std::slice::from_raw_parts(ptr as *const u8, len as usize);
    String::from_utf8_lossy(bytes).into_owned()
}

/// Deletes every function and global variable the kernel cannot reach, and the module-level
/// "used" lists (they exist to keep variables alive for the host's registration).
fn keep_only_reachable(module: &Module, kernel: FunctionValue) {
    let m = module.as_mut_ptr();
    // SAFETY: all values belong to `m`; bodies and initializers are dropped before deletion, and
    // remaining (dead constant / metadata) uses are replaced with poison first.
    unsafe {
        for name in [
            c"llvm.used",
            c"llvm.compiler.used",
            c"llvm.global_ctors",
            c"llvm.global_dtors",
        ] {
            let g = LLVMGetNamedGlobal(m, name.as_ptr());
            if !g.is_null() {
                LLVMDeleteGlobal(g);
            }
        }
        let keep = reachable(kernel.as_value_ref());
        let funcs: Vec<LLVMValueRef> = iter(LLVMGetFirstFunction(m), |v| LLVMGetNextFunction(v))
            .filter(|f| !keep.contains(f))
            .collect();
        let globals: Vec<LLVMValueRef> = iter(LLVMGetFirstGlobal(m), |v| LLVMGetNextGlobal(v))
            .filter(|g| !keep.contains(g))
            .collect();
        for &f in &funcs {
            while let Some(bb) = non_null(LLVMGetFirstBasicBlock(f)) {
                LLVMDeleteBasicBlock(bb);
            }
        }
        for &g in &globals {
            LLVMSetInitializer(g, std::ptr::null_mut());
        }
        for &v in funcs.iter().chain(&globals) {
            LLVMReplaceAllUsesWith(v, LLVMGetPoison(LLVMTypeOf(v)));
        }
        funcs.into_iter().for_each(|f| LLVMDeleteFunction(f));
        globals.into_iter().for_each(|g| LLVMDeleteGlobal(g));
    }
}

/// The unit's variables that a module holding one kernel must not keep local: mutable
/// variables of global memory with local linkage (`static __device__`, function-scope statics)
/// that some code of the unit may write.
///
/// In the unit, every kernel sees such a variable, and it outlives a launch; in a module that
/// holds one kernel, local linkage tells the optimizer that it sees every access. Then GlobalOpt
/// and IPSCCP (which act only on globals with `hasLocalLinkage()`) delete the stores of a kernel
/// that never reads it and fold the loads of one that never writes it to the initializer: wrong
/// for the program, and a lost store is invisible to replay. A variable that nothing in the unit
/// writes, nor lets its address escape, keeps its initializer for good (no other unit can name
/// it, and one the host uses clang already made external), so the optimizer's reading of it is
/// right and it stays local: libdevice's `__cudart_i2opi_f` is one, and local it is loaded
/// through the read-only cache as in clang's own build. `__shared__` (address space 3, one per
/// block), `__constant__` (4) and constants cannot change between kernels and stay local too.
fn shared_in_unit(tu: &Module) -> HashSet<String> {
    const GENERIC: u32 = 0;
    const GLOBAL: u32 = 1;
    // SAFETY: reading the globals of a live module.
    unsafe {
        iter(LLVMGetFirstGlobal(tu.as_mut_ptr()), |v| {
            LLVMGetNextGlobal(v)
        })
        .filter(|&g| {
            let local = matches!(
                LLVMGetLinkage(g),
                llvm_sys::LLVMLinkage::LLVMInternalLinkage
                    | llvm_sys::LLVMLinkage::LLVMPrivateLinkage
            );
            let space = LLVMGetPointerAddressSpace(LLVMTypeOf(g));
            local
                && LLVMIsGlobalConstant(g) == 0
                && !LLVMGetInitializer(g).is_null()
                && (space == GENERIC || space == GLOBAL)
                && !only_loaded(g)
        })
        .filter_map(|g| {
            let mut len = 0usize;
            let name = LLVMGetValueName2(g, &mut len);
            let bytes = std::slice::from_raw_parts(name as *const u8, len);
            // An unnamed one cannot stay external (GlobalOpt makes it internal again); clang
            // names every variable it emits.
            (len > 0).then(|| String::from_utf8_lossy(bytes).into_owned())
        })
        .collect()
    }
}

/// Whether every use of pointer `p` only loads through it, following address computations
/// (GEPs and casts, as instructions or constant expressions). Anything else, a store or an
/// atomic, a call, a pointer stored or compared, another global's initializer, counts as a
/// possible write.
unsafe fn only_loaded(p: LLVMValueRef) -> bool {
    use llvm_sys::LLVMOpcode::*;
    let mut work = vec![p];
    while let Some(p) = work.pop() {
        let mut u = LLVMGetFirstUse(p);
        while let Some(use_) = non_null(u) {
            u = LLVMGetNextUse(use_);
            let user = LLVMGetUser(use_);
            if !LLVMIsALoadInst(user).is_null() {
                continue;
            }
            let opcode = if !LLVMIsAInstruction(user).is_null() {
                LLVMGetInstructionOpcode(user)
            } else if !LLVMIsAConstantExpr(user).is_null() {
                LLVMGetConstOpcode(user)
            } else {
                return false;
            };
            // Only as the base of an address; a pointer used as anything else escapes.
            let derived = matches!(opcode, LLVMGetElementPtr | LLVMAddrSpaceCast | LLVMBitCast);
            if !derived || LLVMGetOperand(user, 0) != p {
                return false;
            }
            work.push(user);
        }
    }
    true
}

/// Gives the variables named in `shared` external linkage, as clang itself does for a
/// `static __device__` variable the host uses: an external definition may be read and written
/// by code the optimizer cannot see, so every access stays. The name stays, so the PTX symbol is
/// the unit's (the splice takes the tuned module's `.visible` for the host's declaration);
/// `dso_local` stays as clang writes it (it says where the definition is, not who accesses it);
/// `unnamed_addr` goes, so that no copy is merged or duplicated; `externally_initialized` makes
/// it read exactly as clang writes a `__device__` variable. Other modules are left untouched, so
/// their content hash stays.
fn share_variables(module: &Module, shared: &HashSet<String>) {
    if shared.is_empty() {
        return;
    }
    // SAFETY: every value is a global variable of the live module `module` owns.
    unsafe {
        for g in iter(LLVMGetFirstGlobal(module.as_mut_ptr()), |v| {
            LLVMGetNextGlobal(v)
        }) {
            let mut len = 0usize;
            let name = LLVMGetValueName2(g, &mut len);
            let name = std::slice::from_raw_parts(name as *const u8, len);
            if !shared.contains(String::from_utf8_lossy(name).as_ref()) {
                continue;
            }
            LLVMSetLinkage(g, llvm_sys::LLVMLinkage::LLVMExternalLinkage);
            LLVMSetUnnamedAddress(g, llvm_sys::LLVMUnnamedAddr::LLVMNoUnnamedAddr);
            LLVMSetExternallyInitialized(g, 1);
        }
    }
}

fn non_null<T>(v: *mut T) -> Option<*mut T> {
    (!v.is_null()).then_some(v)
}

/// Walks an LLVM intrusive list (functions, globals, blocks, instructions).
unsafe fn iter<T>(first: *mut T, next: impl Fn(*mut T) -> *mut T) -> impl Iterator<Item = *mut T> {
    std::iter::successors(non_null(first), move |&v| non_null(next(v)))
}

/// Every global value (function, variable, alias) reachable from `root` through instruction
/// operands, constant expressions and initializers.
unsafe fn reachable(root: LLVMValueRef) -> HashSet<LLVMValueRef> {
    let mut seen = HashSet::new();
    let mut work = vec![root];
    while let Some(v) = work.pop() {
        if !seen.insert(v) {
            continue;
        }
        if !LLVMIsAFunction(v).is_null() {
            for bb in iter(LLVMGetFirstBasicBlock(v), |b| LLVMGetNextBasicBlock(b)) {
                for inst in iter(LLVMGetFirstInstruction(bb), |i| LLVMGetNextInstruction(i)) {
                    push_operands(inst, &mut work, &seen);
                }
            }
        } else if !LLVMIsAGlobalVariable(v).is_null() {
            if let Some(init) = non_null(LLVMGetInitializer(v)) {
                work.push(init);
            }
        } else if !LLVMIsAGlobalAlias(v).is_null() {
            work.push(LLVMAliasGetAliasee(v));
        } else {
            // A constant expression or aggregate: walk into its operands.
            push_operands(v, &mut work, &seen);
        }
    }
    seen.retain(|&v| !LLVMIsAGlobalValue(v).is_null());
    seen
}

unsafe fn push_operands(
    user: LLVMValueRef,
    work: &mut Vec<LLVMValueRef>,
    seen: &HashSet<LLVMValueRef>,
) {
    let n = LLVMGetNumOperands(user);
    for i in 0..n.max(0) as u32 {
        let op = LLVMGetOperand(user, i);
        if op.is_null() || seen.contains(&op) {
            continue;
        }
        let is_global = !LLVMIsAGlobalValue(op).is_null();
        let is_const = !LLVMIsAConstant(op).is_null() && LLVMGetNumOperands(op) > 0;
        if is_global || is_const {
            work.push(op);
        }
    }
}

fn params(module: &Module, f: FunctionValue) -> Vec<Param> {
    // SAFETY: the data layout string and types all belong to the live module.
    unsafe {
        let td = LLVMCreateTargetData(LLVMGetDataLayoutStr(module.as_mut_ptr()));
        let byval_kind = LLVMGetEnumAttributeKindForName(c"byval".as_ptr(), 5);
        let fv = f.as_value_ref();
        let out = (0..LLVMCountParams(fv))
            .map(|i| {
                let p = LLVMGetParam(fv, i);
                let ty = LLVMTypeOf(p);
                let pointer = LLVMGetTypeKind(ty) == llvm_sys::LLVMTypeKind::LLVMPointerTypeKind;
                let byval_attr = LLVMGetEnumAttributeAtIndex(fv, i + 1, byval_kind);
                let byval = (!byval_attr.is_null())
                    .then(|| layout(td, LLVMGetTypeAttributeValue(byval_attr)));
                let passed = if byval.is_some() {
                    LLVMGetTypeAttributeValue(byval_attr)
                } else {
                    ty
                };
                Param {
                    index: i,
                    llvm_type: type_string(ty),
                    size: LLVMABISizeOfType(td, passed),
                    align: LLVMABIAlignmentOfType(td, passed) as u64,
                    pointer: pointer && byval.is_none(),
                    address_space: (pointer && byval.is_none())
                        .then(|| LLVMGetPointerAddressSpace(ty)),
                    byval,
                }
            })
            .collect();
        LLVMDisposeTargetData(td);
        out
    }
}

unsafe fn layout(td: LLVMTargetDataRef, ty: LLVMTypeRef) -> StructLayout {
    let fields = if LLVMGetTypeKind(ty) == llvm_sys::LLVMTypeKind::LLVMStructTypeKind {
        (0..LLVMCountStructElementTypes(ty))
            .map(|i| {
                let ft = LLVMStructGetTypeAtIndex(ty, i);
                Field {
                    offset: LLVMOffsetOfElement(td, ty, i),
                    size: LLVMABISizeOfType(td, ft),
                    llvm_type: type_string(ft),
                }
            })
            .collect()
    } else {
        Vec::new()
    };
    StructLayout {
        llvm_type: type_string(ty),
        fields,
    }
}

unsafe fn type_string(ty: LLVMTypeRef) -> String {
    let s = LLVMPrintTypeToString(ty);
    let out = CStr::from_ptr(s).to_string_lossy().into_owned();
    LLVMDisposeMessage(s);
    out
}

/// Loads a stored kernel module (bitcode) back.
pub fn load_kernel<'c>(
    ctx: &'c Context,
    bitcode: &[u8],
    what: &str,
) -> Result<Module<'c>, IrError> {
    super::load_bytes(ctx, bitcode, what)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lower::{to_ptx, Codegen};

    /// As clang 22 emits it before any pass: `static __device__ int state;` that one kernel writes
    /// and another reads, `__device__ int pub;`, `__constant__ int coef[2];`, a `__shared__`
    /// variable, a string, a mutable static nothing writes (`table`) and one that a third kernel
    /// only updates atomically (`calls`).
    const UNIT: &str = r#"
target datalayout = "e-p6:32:32-i64:64-i128:128-i256:256-v16:16-v32:32-n16:32:64"
target triple = "nvptx64-nvidia-cuda"

@pub = dso_local addrspace(1) externally_initialized global i32 0, align 4
@coef = dso_local addrspace(4) externally_initialized constant [2 x i32] zeroinitializer, align 4
@_ZL5state = internal addrspace(1) global i32 0, align 4
@_ZZ6parityPiE1s = internal addrspace(3) global i32 undef, align 4
@.str = private unnamed_addr addrspace(1) constant [4 x i8] c"abc\00", align 1
@_ZL5table = internal addrspace(1) global [2 x i32] [i32 5, i32 7], align 4
@_ZL5calls = internal addrspace(1) global i32 0, align 4
@llvm.compiler.used = appending global [2 x ptr] [ptr addrspacecast (ptr addrspace(1) @pub to ptr), ptr addrspacecast (ptr addrspace(4) @coef to ptr)], section "llvm.metadata"

define dso_local ptx_kernel void @_Z8setstatei(i32 noundef %v) #0 {
  store i32 %v, ptr addrspacecast (ptr addrspace(1) @_ZL5state to ptr), align 4
  store i32 %v, ptr addrspacecast (ptr addrspace(1) @pub to ptr), align 4
  ret void
}

define dso_local ptx_kernel void @_Z6parityPi(ptr noundef %out) #0 {
  %c = load i32, ptr getelementptr inbounds ([2 x i32], ptr addrspacecast (ptr addrspace(4) @coef to ptr), i64 0, i64 1), align 4
  store i32 %c, ptr addrspacecast (ptr addrspace(3) @_ZZ6parityPiE1s to ptr), align 4
  %st = load i32, ptr addrspacecast (ptr addrspace(1) @_ZL5state to ptr), align 4
  %bit = and i32 %st, 1
  %p = load i32, ptr addrspacecast (ptr addrspace(1) @pub to ptr), align 4
  %a = add nsw i32 %bit, %p
  %s = load i32, ptr addrspacecast (ptr addrspace(3) @_ZZ6parityPiE1s to ptr), align 4
  %b = add nsw i32 %a, %s
  %i = and i32 %st, 3
  %ch = getelementptr inbounds [4 x i8], ptr addrspace(1) @.str, i32 0, i32 %i
  %chv = load i8, ptr addrspace(1) %ch, align 1
  %chw = zext i8 %chv to i32
  %r = add nsw i32 %b, %chw
  %t = getelementptr inbounds [2 x i32], ptr addrspace(1) @_ZL5table, i64 0, i64 1
  %tv = load i32, ptr addrspace(1) %t, align 4
  %rt = add nsw i32 %r, %tv
  store i32 %rt, ptr %out, align 4
  ret void
}

define dso_local ptx_kernel void @_Z5countv() #0 {
  %old = atomicrmw add ptr addrspacecast (ptr addrspace(1) @_ZL5calls to ptr), i32 1 monotonic, align 4
  ret void
}

define dso_local ptx_kernel void @_Z4plainPi(ptr noundef %out) #0 {
  %c = load i32, ptr getelementptr inbounds ([2 x i32], ptr addrspacecast (ptr addrspace(4) @coef to ptr), i64 0, i64 0), align 4
  store i32 %c, ptr %out, align 4
  ret void
}

attributes #0 = { convergent mustprogress noinline norecurse nounwind "target-cpu"="sm_90" "target-features"="+ptx88,+sm_90" }
"#;

    fn split_unit() -> Vec<KernelModule> {
        let ctx = Context::create();
        let unit = parse_text(&ctx, UNIT, "unit").unwrap();
        split(&unit, "unit").unwrap()
    }

    fn ptx_of(kernels: &[KernelModule], name: &str, pipeline: &str) -> String {
        let k = kernels.iter().find(|k| k.signature.name == name).unwrap();
        let ctx = Context::create();
        let m = load_kernel(&ctx, &k.bitcode, name).unwrap();
        to_ptx(&m, pipeline, &Codegen::default()).unwrap()
    }

    /// Lines of PTX code (not declarations) that name `sym` as a memory operand.
    fn accesses<'p>(ptx: &'p str, op: &str, sym: &str) -> Vec<&'p str> {
        let operand = format!("[{sym}]");
        ptx.lines()
            .filter(|l| l.trim_start().starts_with(op) && l.contains(&operand))
            .collect()
    }

    /// A unit whose one kernel holds inline assembly at source location `loc`.
    fn asm_unit(loc: u64) -> String {
        format!(
            r#"target triple = "nvptx64-nvidia-cuda"

define ptx_kernel void @k(ptr %p) #0 {{
  %v = call i32 asm sideeffect "mov.u32 $0, %laneid;", "=r"(), !srcloc !0
  store i32 %v, ptr %p, align 4
  ret void
}}

attributes #0 = {{ "target-cpu"="sm_90" }}
!0 = !{{i64 {loc}}}
"#
        )
    }

    #[test]
    fn inline_assembly_at_another_source_offset_is_the_same_kernel() {
        let hash = |loc| {
            let ctx = Context::create();
            let unit = parse_text(&ctx, &asm_unit(loc), "unit").unwrap();
            let k = split(&unit, "unit").unwrap().remove(0);
            let ctx = Context::create();
            let m = load_kernel(&ctx, &k.bitcode, "k").unwrap();
            assert!(!m.print_to_string().to_string().contains("srcloc"));
            k.hash
        };
        assert_eq!(hash(1234), hash(98765));
    }

    #[test]
    fn a_unit_static_written_by_one_kernel_keeps_the_store() {
        let kernels = split_unit();
        for pipeline in ["default<O2>", "default<O3>"] {
            let ptx = ptx_of(&kernels, "_Z8setstatei", pipeline);
            assert_eq!(
                accesses(&ptx, "st.", "_ZL5state").len(),
                1,
                "{pipeline}:\n{ptx}"
            );
            assert!(ptx.contains(".global .align 4 .u32 _ZL5state;"), "{ptx}");
        }
    }

    #[test]
    fn a_unit_static_read_by_another_kernel_is_loaded_not_folded() {
        let kernels = split_unit();
        for pipeline in ["default<O2>", "default<O3>"] {
            let ptx = ptx_of(&kernels, "_Z6parityPi", pipeline);
            assert_eq!(
                accesses(&ptx, "ld.", "_ZL5state").len(),
                1,
                "{pipeline}:\n{ptx}"
            );
        }
    }

    #[test]
    fn only_mutable_global_statics_become_external() {
        let kernels = split_unit();
        let k = kernels
            .iter()
            .find(|k| k.signature.name == "_Z6parityPi")
            .unwrap();
        let ctx = Context::create();
        let text = load_kernel(&ctx, &k.bitcode, "parity")
            .unwrap()
            .print_to_string()
            .to_string();
        let decl = |name: &str| {
            text.lines()
                .find(|l| l.starts_with(&format!("@{name} =")))
                .unwrap_or_else(|| panic!("no @{name} in\n{text}"))
                .to_owned()
        };
        let state = decl("_ZL5state");
        assert!(
            !state.contains("internal") && !state.contains("unnamed_addr"),
            "{state}"
        );
        assert!(state.contains("externally_initialized global"), "{state}");
        assert!(decl("_ZZ6parityPiE1s").contains("internal addrspace(3)"));
        // Nothing writes it: it is its initializer for good, and local it stays.
        assert!(decl("_ZL5table").contains("internal addrspace(1) global"));
        assert!(decl(".str").contains("private unnamed_addr addrspace(1) constant"));
        assert_eq!(
            decl("coef"),
            "@coef = dso_local addrspace(4) externally_initialized constant [2 x i32] \
             zeroinitializer, align 4"
        );
    }

    #[test]
    fn what_the_unit_may_write() {
        let ctx = Context::create();
        let unit = parse_text(&ctx, UNIT, "unit").unwrap();
        let mut shared: Vec<String> = shared_in_unit(&unit).into_iter().collect();
        shared.sort();
        assert_eq!(shared, ["_ZL5calls", "_ZL5state"]);
    }

    #[test]
    fn a_kernel_without_them_is_untouched() {
        let ctx = Context::create();
        let unit = parse_text(&ctx, UNIT, "unit").unwrap();
        let plain = unit.clone();
        keep_only_reachable(&plain, plain.get_function("_Z4plainPi").unwrap());
        let before = plain.print_to_string().to_string();
        share_variables(&plain, &shared_in_unit(&unit));
        assert_eq!(plain.print_to_string().to_string(), before);
    }
}
