//! Specialization: a recorded launch's values folded into the kernel as constants before the
//! pipeline runs, so that its passes see them (loop trip counts become known, bounds checks
//! fold, strides strength-reduce). The code is then right only for launches that pass the same
//! values, which is why it ships behind a guard (`Candidate::admits`, apply's dispatch).

use crate as ir;
use crate::passes::candidate::Specialize;
use inkwell::module::Module;
use inkwell::types::BasicTypeEnum;
use inkwell::values::{AsValueRef, BasicValueEnum, FunctionValue};

#[derive(Debug, thiserror::Error)]
pub enum SpecializeError {
    #[error("specialize: the module has no kernel")]
    NoKernel,
    #[error("specialize: kernel `{kernel}` has no parameter {index}")]
    NoParam { kernel: String, index: u32 },
    #[error(
        "specialize: parameter {index} of `{kernel}` is {ty}, not a scalar of {bytes} bytes; \
         only integer and float scalars fold"
    )]
    NotScalar {
        kernel: String,
        index: u32,
        ty: String,
        bytes: usize,
    },
    #[error("specialize: parameter {index}: `{hex}` is not whole bytes of hex")]
    BadValue { index: u32, hex: String },
}

/// The special registers a dimension is read from (x, y, z).
const BLOCK_DIM: [&str; 3] = [
    "llvm.nvvm.read.ptx.sreg.ntid.x",
    "llvm.nvvm.read.ptx.sreg.ntid.y",
    "llvm.nvvm.read.ptx.sreg.ntid.z",
];
const GRID_DIM: [&str; 3] = [
    "llvm.nvvm.read.ptx.sreg.nctaid.x",
    "llvm.nvvm.read.ptx.sreg.nctaid.y",
    "llvm.nvvm.read.ptx.sreg.nctaid.z",
];

/// Folds `s` into the module's kernel: each named parameter's uses become its value, and each
/// read of `blockDim`/`gridDim` the launch's dimension.
pub fn fold(module: &Module, s: &Specialize) -> Result<(), SpecializeError> {
    let kernel = module
        .get_functions()
        .find(|f| f.count_basic_blocks() > 0 && f.get_call_conventions() == ir::PTX_KERNEL_CC)
        .ok_or(SpecializeError::NoKernel)?;
    for a in &s.args {
        let bytes = a.bytes().ok_or_else(|| SpecializeError::BadValue {
            index: a.index,
            hex: a.hex.clone(),
        })?;
        fold_param(kernel, a.index, &bytes)?;
    }
    if let Some(b) = s.block {
        fold_reads(module, &BLOCK_DIM, b);
    }
    if let Some(g) = s.grid {
        fold_reads(module, &GRID_DIM, g);
    }
    Ok(())
}

fn fold_param(kernel: FunctionValue, index: u32, bytes: &[u8]) -> Result<(), SpecializeError> {
    let name = kernel.get_name().to_string_lossy().into_owned();
    let param = kernel
        .get_nth_param(index)
        .ok_or_else(|| SpecializeError::NoParam {
            kernel: name.clone(),
            index,
        })?;
    let not_scalar = |ty: String| SpecializeError::NotScalar {
        kernel: name.clone(),
        index,
        ty,
        bytes: bytes.len(),
    };
    let value: BasicValueEnum = match param.get_type() {
        BasicTypeEnum::IntType(t) if t.get_bit_width() as usize == bytes.len() * 8 => {
            let mut word = [0u8; 8];
            word[..bytes.len()].copy_from_slice(bytes);
            t.const_int(u64::from_le_bytes(word), false).into()
        }
        BasicTypeEnum::FloatType(t) if bytes.len() == 4 && is_type(t, "float") => {
            let v = f32::from_le_bytes(bytes.try_into().unwrap_or_default());
            t.const_float(f64::from(v)).into()
        }
        BasicTypeEnum::FloatType(t) if bytes.len() == 8 && is_type(t, "double") => t
            .const_float(f64::from_le_bytes(bytes.try_into().unwrap_or_default()))
            .into(),
        other => return Err(not_scalar(other.print_to_string().to_string())),
    };
    // SAFETY: both values belong to the kernel's context and have the same type.
    unsafe { llvm_sys::core::LLVMReplaceAllUsesWith(param.as_value_ref(), value.as_value_ref()) };
    Ok(())
}

fn is_type(t: inkwell::types::FloatType, name: &str) -> bool {
    t.print_to_string().to_string() == name
}

/// Replaces every call of the three intrinsics with the dimension's value.
fn fold_reads(module: &Module, intrinsics: &[&str; 3], dims: [u32; 3]) {
    for (name, value) in intrinsics.iter().zip(dims) {
        let Some(f) = module.get_function(name) else {
            continue;
        };
        let i32t = module.get_context().i32_type();
        let constant = i32t.const_int(u64::from(value), false);
        use llvm_sys::core::*;
        // SAFETY: the intrinsic's users are its calls, each returning i32 as the constant
        // does; they are collected first, then each call's uses replaced and the call erased.
        unsafe {
            let mut calls = Vec::new();
            let mut at = LLVMGetFirstUse(f.as_value_ref());
            while !at.is_null() {
                let user = LLVMGetUser(at);
                if !LLVMIsACallInst(user).is_null() {
                    calls.push(user);
                }
                at = LLVMGetNextUse(at);
            }
            for call in calls {
                LLVMReplaceAllUsesWith(call, constant.as_value_ref());
                LLVMInstructionEraseFromParent(call);
            }
        }
    }
}

/// Which parameters of a kernel can fold: integer and float scalars (by the signature's LLVM
/// type), by index.
pub fn foldable(sig: &crate::kernel::KernelSignature) -> Vec<u32> {
    sig.params
        .iter()
        .filter(|p| !p.pointer && p.byval.is_none())
        .filter(|p| {
            matches!(
                p.llvm_type.as_str(),
                "i8" | "i16" | "i32" | "i64" | "float" | "double"
            )
        })
        .map(|p| p.index)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::passes::candidate::FoldedArg;

    /// y[i] = a * i for i < n, i = blockIdx.x * blockDim.x + threadIdx.x.
    const KERNEL: &str = r#"
target triple = "nvptx64-nvidia-cuda"
define ptx_kernel void @k(ptr addrspace(1) %y, i32 %n, float %a) {
entry:
  %b = call i32 @llvm.nvvm.read.ptx.sreg.ctaid.x()
  %d = call i32 @llvm.nvvm.read.ptx.sreg.ntid.x()
  %t = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()
  %bd = mul i32 %b, %d
  %i = add i32 %bd, %t
  %in = icmp slt i32 %i, %n
  br i1 %in, label %body, label %done
body:
  %f = sitofp i32 %i to float
  %v = fmul float %f, %a
  %p = getelementptr float, ptr addrspace(1) %y, i32 %i
  store float %v, ptr addrspace(1) %p
  br label %done
done:
  ret void
}
declare i32 @llvm.nvvm.read.ptx.sreg.ctaid.x()
declare i32 @llvm.nvvm.read.ptx.sreg.ntid.x()
declare i32 @llvm.nvvm.read.ptx.sreg.tid.x()
"#;

    fn folded(s: &Specialize) -> Result<String, SpecializeError> {
        let ctx = inkwell::context::Context::create();
        let m = crate::load_bytes(&ctx, KERNEL.as_bytes(), "k.ll").unwrap();
        fold(&m, s)?;
        m.verify().unwrap();
        Ok(m.print_to_string().to_string())
    }

    #[test]
    fn folded_values_replace_every_use_and_the_rest_stays() {
        let ir = folded(&Specialize {
            args: vec![
                FoldedArg::of_bytes(1, &1000i32.to_le_bytes()),
                FoldedArg::of_bytes(2, &2.5f32.to_le_bytes()),
            ],
            block: Some([128, 1, 1]),
            grid: None,
        })
        .unwrap();
        assert!(ir.contains("icmp slt i32 %i, 1000"), "{ir}");
        assert!(ir.contains("fmul float %f, 2.5"), "{ir}");
        assert!(ir.contains("mul i32 %b, 128"), "{ir}");
        assert!(
            !ir.contains("call i32 @llvm.nvvm.read.ptx.sreg.ntid.x"),
            "{ir}"
        );
        // What was not folded is read as before.
        assert!(
            ir.contains("call i32 @llvm.nvvm.read.ptx.sreg.ctaid.x"),
            "{ir}"
        );
        assert!(
            ir.contains("getelementptr float, ptr addrspace(1) %y"),
            "{ir}"
        );
    }

    #[test]
    fn a_pointer_a_size_mismatch_or_a_missing_parameter_is_refused_by_name() {
        let one = |index, bytes: &[u8]| Specialize {
            args: vec![FoldedArg::of_bytes(index, bytes)],
            block: None,
            grid: None,
        };
        let err = folded(&one(0, &[0; 8])).unwrap_err().to_string();
        assert!(
            err.contains("parameter 0 of `k`") && err.contains("ptr"),
            "{err}"
        );
        let err = folded(&one(1, &[0; 8])).unwrap_err().to_string();
        assert!(err.contains("not a scalar of 8 bytes"), "{err}");
        let err = folded(&one(7, &[0; 4])).unwrap_err().to_string();
        assert!(err.contains("no parameter 7"), "{err}");
        let bad = Specialize {
            args: vec![FoldedArg {
                index: 1,
                hex: "xyz".into(),
            }],
            block: None,
            grid: None,
        };
        assert!(folded(&bad).unwrap_err().to_string().contains("`xyz`"));
    }
}
