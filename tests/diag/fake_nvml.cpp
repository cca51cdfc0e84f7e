// A fake libnvidia-ml: the NVML entry points stoker's diagnostics use, returning fixed values,
// so the dlopen path, the declared struct layouts and the monitor's arithmetic are tested on
// machines without a GPU. By default one device, an "NVIDIA H200" at 1,500 of 1,980 MHz under a
// power cap every other sample, its application clocks lowered to 1,755 of 1,980 MHz; ECC
// counters with a few errors, rows remapped, page retirement "not supported" (as on Ampere+).
//
// FAKE_NVML_GPUS=N (read at each call, 1..8) makes N such devices on buses 0x18, 0x19, ...:
// GPUs 0-1, 2-3, ... are pairs joined by 4 NVLinks under one PCIe switch with P2P; GPUs of
// different pairs are across CPU sockets without P2P. FAKE_NVML_NVSWITCH=1 instead joins every
// GPU's 18 NVLinks to NVSwitches, with P2P between all of them.
#include <cstdio>
#include <cstdlib>
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
constexpr nvmlReturn_t kSuccess = 0, kInvalid = 2, kNotSupported = 3, kNotFound = 6,
                       kInsufficientSize = 7;

unsigned gpu_count() {
  const char* n = std::getenv("FAKE_NVML_GPUS");
  const int v = n ? std::atoi(n) : 1;
  return v < 1 ? 1u : v > 8 ? 8u : static_cast<unsigned>(v);
}
bool nvswitch() {
  const char* s = std::getenv("FAKE_NVML_NVSWITCH");
  return s && std::strcmp(s, "1") == 0;
}
nvmlDevice_t device(unsigned i) { return reinterpret_cast<nvmlDevice_t>(0x1234 + 0x100 * i); }
// The device's index, -1 when `d` is no device (or NVML is not initialized).
int index_of(nvmlDevice_t d) {
  if (g_initialized <= 0) return -1;
  for (unsigned i = 0; i < gpu_count(); ++i)
    if (d == device(i)) return static_cast<int>(i);
  return -1;
}
bool ok(nvmlDevice_t d) { return index_of(d) >= 0; }
void fill_pci(nvmlPciInfo_t* p, unsigned bus) {
  std::memset(p, 0, sizeof *p);
  std::snprintf(p->busId, sizeof p->busId, "00000000:%02X:00.0", bus);
  std::snprintf(p->busIdLegacy, sizeof p->busIdLegacy, "0000:%02X:00.0", bus);
  p->bus = bus;
}
// The GPU paired with GPU i by NVLink, -1 when it has none.
int nvlink_peer(int i) {
  const int peer = i ^ 1;
  return peer < static_cast<int>(gpu_count()) ? peer : -1;
}
constexpr unsigned kPairLinks = 4, kMaxLinks = 18, kSwitchBus = 0xA0;
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
  *n = gpu_count();
  return kSuccess;
}
nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int i, nvmlDevice_t* d) {
  if (i >= gpu_count()) return kInvalid;
  *d = device(i);
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
  if (!ok(d)) return kInvalid;
  fill_pci(p, 0x18 + static_cast<unsigned>(index_of(d)));
  return kSuccess;
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
// Corrected: 3 volatile, 12 aggregate; uncorrected: 0 volatile, 1 aggregate.
nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t d, int type, int counter,
                                         unsigned long long* n) {
  if (!ok(d)) return kInvalid;
  if (type == 0)
    *n = counter == 0 ? 3 : 12;
  else
    *n = counter == 0 ? 0 : 1;
  return kSuccess;
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

nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t d, unsigned int* current, unsigned int* pending) {
  *current = 0;
  *pending = 0;
  return ok(d) ? kSuccess : kInvalid;
}
// Ampere+ GPUs remap rows instead of retiring pages.
nvmlReturn_t nvmlDeviceGetRetiredPages(nvmlDevice_t d, int, unsigned int*, unsigned long long*) {
  return ok(d) ? kNotSupported : kInvalid;
}
nvmlReturn_t nvmlDeviceGetRetiredPagesPendingStatus(nvmlDevice_t d, int*) {
  return ok(d) ? kNotSupported : kInvalid;
}
// 2 rows remapped after correctable errors, 1 after an uncorrectable one; none pending or failed.
nvmlReturn_t nvmlDeviceGetRemappedRows(nvmlDevice_t d, unsigned int* corr, unsigned int* unc,
                                       unsigned int* pending, unsigned int* failed) {
  *corr = 2;
  *unc = 1;
  *pending = 0;
  *failed = 0;
  return ok(d) ? kSuccess : kInvalid;
}
nvmlReturn_t nvmlDeviceGetApplicationsClock(nvmlDevice_t d, int type, unsigned int* mhz) {
  *mhz = type == 1 ? 1755 : 2619;
  return ok(d) ? kSuccess : kInvalid;
}
nvmlReturn_t nvmlDeviceGetDefaultApplicationsClock(nvmlDevice_t d, int type, unsigned int* mhz) {
  *mhz = type == 1 ? 1980 : 2619;
  return ok(d) ? kSuccess : kInvalid;
}
nvmlReturn_t nvmlDeviceGetPowerManagementDefaultLimit(nvmlDevice_t d, unsigned int* mw) {
  *mw = 700000;
  return ok(d) ? kSuccess : kInvalid;
}
nvmlReturn_t nvmlDeviceGetNvLinkState(nvmlDevice_t d, unsigned int link, int* active) {
  if (!ok(d) || link >= kMaxLinks) return kInvalid;
  *active = nvswitch() || (nvlink_peer(index_of(d)) >= 0 && link < kPairLinks) ? 1 : 0;
  return kSuccess;
}
nvmlReturn_t nvmlDeviceGetNvLinkRemoteDeviceType(nvmlDevice_t d, unsigned int link, int* type) {
  if (!ok(d) || link >= kMaxLinks) return kInvalid;
  *type = nvswitch() ? 2 : 0;  // NVSwitch : GPU
  return kSuccess;
}
nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo_v2(nvmlDevice_t d, unsigned int link,
                                                 nvmlPciInfo_t* p) {
  if (!ok(d) || link >= kMaxLinks) return kInvalid;
  const int peer = nvlink_peer(index_of(d));
  if (nvswitch())
    fill_pci(p, kSwitchBus);
  else if (peer >= 0 && link < kPairLinks)
    fill_pci(p, 0x18 + static_cast<unsigned>(peer));
  else
    return kInvalid;  // an inactive link has no remote end
  return kSuccess;
}
// GPUs of one NVLink pair share a PCIe switch; the others are across CPU sockets.
nvmlReturn_t nvmlDeviceGetTopologyCommonAncestor(nvmlDevice_t d1, nvmlDevice_t d2, int* level) {
  if (!ok(d1) || !ok(d2)) return kInvalid;
  *level = index_of(d1) / 2 == index_of(d2) / 2 ? 10 : 50;
  return kSuccess;
}
// P2P within a pair or through NVSwitches; otherwise "IOH topology not supported" (3).
nvmlReturn_t nvmlDeviceGetP2PStatus(nvmlDevice_t d1, nvmlDevice_t d2, int, int* status) {
  if (!ok(d1) || !ok(d2)) return kInvalid;
  *status = nvswitch() || index_of(d1) / 2 == index_of(d2) / 2 ? 0 : 3;
  return kSuccess;
}

}  // extern "C"
