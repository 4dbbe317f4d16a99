// r3's capture plugin for clang (`-fpass-plugin`): writes each NVPTX module's IR, as it is
// before the first LLVM pass runs, to $R3_CAPTURE_DIR. It only reads the module, so the
// compile's output is exactly clang's, and the device front end runs once (the point of it).
//
// It hooks pass instrumentation rather than a pipeline extension point because NVPTX
// registers its own pipeline-start passes (nvvm-reflect) ahead of any plugin's; the first
// "before pass" callback sees the module before any of them.
//
// Built by r3 (src/driver/plugin.rs) against the LLVM of the clang it wraps, into r3's cache.

#include "llvm/Bitcode/BitcodeWriter.h"
#include "llvm/IR/Function.h"
#include "llvm/IR/Module.h"
#include "llvm/IR/PassInstrumentation.h"
#include "llvm/Passes/PassBuilder.h"
#include "llvm/Plugins/PassPlugin.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/raw_ostream.h"

#include <atomic>
#include <cstdlib>
#include <memory>
#include <string>
#include <unistd.h>

using namespace llvm;

namespace {

std::atomic<unsigned> Written{0};

const Module *moduleOf(Any IR) {
  if (const auto *M = llvm::any_cast<const Module *>(&IR))
    return *M;
  if (const auto *F = llvm::any_cast<const Function *>(&IR))
    return (*F)->getParent();
  return nullptr;
}

// Writes `M` to DIR/PID-N.bc through a temporary name, so r3 never reads half a file.
void capture(const Module &M, const std::string &Dir) {
  if (!M.getTargetTriple().isNVPTX())
    return;
  std::string Base = Dir + "/" + std::to_string(getpid()) + "-" +
                     std::to_string(Written.fetch_add(1));
  std::error_code EC;
  {
    raw_fd_ostream OS(Base + ".part", EC, sys::fs::OF_None);
    if (EC)
      return; // r3 notices the missing module and says so; the compile goes on
    WriteBitcodeToFile(M, OS);
    if (OS.has_error()) {
      OS.clear_error();
      return;
    }
  }
  sys::fs::rename(Base + ".part", Base + ".bc");
}

void registerCapture(PassBuilder &PB) {
  const char *Dir = std::getenv("R3_CAPTURE_DIR");
  PassInstrumentationCallbacks *PIC = PB.getPassInstrumentationCallbacks();
  if (!Dir || !*Dir || !PIC)
    return;
  // One pipeline per PassBuilder: the first pass it runs marks the unoptimized module.
  auto Done = std::make_shared<bool>(false);
  std::string D(Dir);
  PIC->registerBeforeNonSkippedPassCallback([Done, D](StringRef, Any IR) {
    if (*Done)
      return;
    *Done = true;
    if (const Module *M = moduleOf(IR))
      capture(*M, D);
  });
}

} // namespace

extern "C" LLVM_ATTRIBUTE_WEAK PassPluginLibraryInfo llvmGetPassPluginInfo() {
  return {LLVM_PLUGIN_API_VERSION, "r3-capture", "1", registerCapture};
}
