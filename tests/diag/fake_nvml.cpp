// A fake libnvidia-ml: the NVML entry points stoker's diagnostics use, returning fixed values,
// so the dlopen path, the declared struct layouts and the monitor's arithmetic are tested on
// machines without a GPU. One device, an "NVIDIA H200" at 1,500 of 1,980 MHz under a power cap
// every other sample; ECC counters are "not supported".
#include <cstring>

extern "C" {

using nvmlReturn_t = int;
using nvmlDevice_t = struct nvmlDevice_st*;
struct nvmlUtilization_t {
  unsigned int gpu, memory;
};
struct nvmlMemory_t {
  unsigned long long total, free, used;
};
struct nvmlPciInfo_t {
  char busIdLegacy[16];
  unsigned int domain, bus, device, pciDeviceId, pciSubSystemId;
  char busId[32];
};
struct nvmlProcessInfo_t {
  unsigned int pid;
  unsigned long long usedGpuMemory;
  unsigned int gpuInstanceId, computeInstanceId;
};

namespace {
int g_initialized = 0;
unsigned long long g_reason_calls = 0;
nvmlDevice_t device() { return reinterpret_cast<nvmlDevice_t>(0x1234); }
bool ok(nvmlDevice_t d) { return g_initialized > 0 && d == device(); }
constexpr nvmlReturn_t kSuccess = 0, kInvalid = 2, kNotSupported = 3, kNotFound = 6,
                       kInsufficientSize = 7;
}  // namespace

nvmlReturn_t nvmlInit_v2() {
  ++g_initialized;
  return kSuccess;
}
nvmlReturn_t nvmlShutdown() {
  --g_initialized;
  return kSuccess;
}
const char* nvmlErrorString(nvmlReturn_t r) {
  return r == kNotSupported ? "Not Supported" : "fake";
}
nvmlReturn_t nvmlSystemGetDriverVersion(char* v, unsigned int n) {
  std::strncpy(v, "580.159.04", n);
  return kSuccess;
}
nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int* v) {
  *v = 13000;
  return kSuccess;
}
nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int* n) {
  *n = 1;
  return kSuccess;
}
nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int i, nvmlDevice_t* d) {
  if (i != 0) return kInvalid;
  *d = device();
  return kSuccess;
}
nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char*, nvmlDevice_t*) { return kNotFound; }
nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t d, char* s, unsigned int n) {
  if (!ok(d)) return kInvalid;
  std::strncpy(s, "NVIDIA H200", n);
  return kSuccess;
}
nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t d, char* s, unsigned int n) {
  std::strncpy(s, "GPU-fake", n);
  return ok(d) ? kSuccess : kInvalid;
}
nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t d, nvmlPciInfo_t* p) {
  std::memset(p, 0, sizeof *p);
  std::strncpy(p->busId, "00000000:18:00.0", sizeof p->busId);
  p->bus = 0x18;
  return ok(d) ? kSuccess : kInvalid;
}
nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t d, int type, unsigned int* v) {
  *v = type == 1 ? 1500 : 2619;  // SM : memory
  return ok(d) ? kSuccess : kInvalid;
}
nvmlReturn_t nvmlDeviceGetMaxClockInfo(nvmlDevice_t d, int type, unsigned int* v) {
  *v = type == 1 ? 1980 : 2619;
  return ok(d) ? kSuccess : kInvalid;
}
nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t d, unsigned int* mw) {
  *mw = 650000;
  return ok(d) ? kSuccess : kInvalid;
}
nvmlReturn_t nvmlDeviceGetEnforcedPowerLimit(nvmlDevice_t d, unsigned int* mw) {
  *mw = 700000;
  return ok(d) ? kSuccess : kInvalid;
}
nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t d, int, unsigned int* c) {
  *c = 71;
  return ok(d) ? kSuccess : kInvalid;
}
nvmlReturn_t nvmlDeviceGetTemperatureThreshold(nvmlDevice_t d, int, unsigned int* c) {
  *c = 90;
  return ok(d) ? kSuccess : kInvalid;
}
nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t d, nvmlUtilization_t* u) {
  u->gpu = 97;
  u->memory = 40;
  return ok(d) ? kSuccess : kInvalid;
}
// Power cap (0x4) on every other call.
nvmlReturn_t nvmlDeviceGetCurrentClocksEventReasons(nvmlDevice_t d, unsigned long long* r) {
  *r = (g_reason_calls++ % 2 == 0) ? 0x4ull : 0x0ull;
  return ok(d) ? kSuccess : kInvalid;
}
nvmlReturn_t nvmlDeviceGetPcieThroughput(nvmlDevice_t d, int counter, unsigned int* kbs) {
  *kbs = counter == 0 ? 1000 : 3000000;  // tx 1 MB/s, rx 3 GB/s
  return ok(d) ? kSuccess : kInvalid;
}
nvmlReturn_t nvmlDeviceGetPersistenceMode(nvmlDevice_t d, int* m) {
  *m = 0;
  return ok(d) ? kSuccess : kInvalid;
}
nvmlReturn_t nvmlDeviceGetEccMode(nvmlDevice_t d, int* current, int* pending) {
  *current = *pending = 1;
  return ok(d) ? kSuccess : kInvalid;
}
nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t, int, int, unsigned long long*) {
  return kNotSupported;
}
nvmlReturn_t nvmlDeviceGetCurrPcieLinkGeneration(nvmlDevice_t d, unsigned int* v) {
  *v = 4;
  return ok(d) ? kSuccess : kInvalid;
}
nvmlReturn_t nvmlDeviceGetMaxPcieLinkGeneration(nvmlDevice_t d, unsigned int* v) {
  *v = 5;
  return ok(d) ? kSuccess : kInvalid;
}
nvmlReturn_t nvmlDeviceGetCurrPcieLinkWidth(nvmlDevice_t d, unsigned int* v) {
  *v = 16;
  return ok(d) ? kSuccess : kInvalid;
}
nvmlReturn_t nvmlDeviceGetMaxPcieLinkWidth(nvmlDevice_t d, unsigned int* v) {
  *v = 16;
  return ok(d) ? kSuccess : kInvalid;
}
nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t d, nvmlMemory_t* m) {
  m->total = 150ull << 30;
  m->used = 3ull << 30;
  m->free = m->total - m->used;
  return ok(d) ? kSuccess : kInvalid;
}
// Two processes; NVML's protocol: too small a buffer gives the count and INSUFFICIENT_SIZE.
nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t d, unsigned int* count,
                                                     nvmlProcessInfo_t* infos) {
  if (!ok(d)) return kInvalid;
  if (*count < 2 || !infos) {
    *count = 2;
    return kInsufficientSize;
  }
  *count = 2;
  infos[0] = {4242, 2ull << 30, 0xFFFFFFFFu, 0xFFFFFFFFu};
  infos[1] = {4343, ~0ull, 0xFFFFFFFFu, 0xFFFFFFFFu};
  return kSuccess;
}

}  // extern "C"
