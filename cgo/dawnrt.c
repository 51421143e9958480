/* dawnrt: see dawnrt.h. C99 plus POSIX dlopen, and dladdr (a GNU and BSD extension) to name the
 * file a bare library name resolved to. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L
#endif

#include "dawnrt.h"

#include <dlfcn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* The one layout measured against the library itself (README): wgpuAdapterGetLimits writes 152 bytes. */
typedef char drt_limits_is_152_bytes[sizeof(WGPULimits) == 152 ? 1 : -1];

#define DRT_SCOPE_WAIT_NS 30000000000ull /* pops and creates resolve at once; this only bounds a hang */

static void vfmt(char *dst, size_t cap, const char *format, va_list ap) {
    if (dst != NULL && cap != 0) vsnprintf(dst, cap, format, ap);
}

static void fmt(char *dst, size_t cap, const char *format, ...) {
    va_list ap;
    va_start(ap, format);
    vfmt(dst, cap, format, ap);
    va_end(ap);
}

/* fail formats the message of a failure into err and returns its code. */
static int fail(int code, char *err, size_t cap, const char *format, ...) {
    va_list ap;
    va_start(ap, format);
    vfmt(err, cap, format, ap);
    va_end(ap);
    return code;
}

static void append(char *dst, size_t cap, const char *format, ...) {
    va_list ap;
    size_t used;
    if (dst == NULL || cap == 0) return;
    used = strlen(dst);
    if (used + 1 >= cap) return;
    va_start(ap, format);
    vsnprintf(dst + used, cap - used, format, ap);
    va_end(ap);
}

static WGPUStringView sv(const char *s) {
    WGPUStringView v;
    v.data = s;
    v.length = WGPU_GEN_STRLEN; /* NULL data with STRLEN is Dawn's "no string" */
    return v;
}

static void copy_sv(char *dst, size_t cap, WGPUStringView v) {
    size_t n;
    if (cap == 0) return;
    if (v.data == NULL) {
        dst[0] = 0;
        return;
    }
    n = v.length == WGPU_GEN_STRLEN ? strlen(v.data) : v.length;
    if (n >= cap) n = cap - 1;
    memcpy(dst, v.data, n);
    dst[n] = 0;
}

/* adapter_info copies what the runtime keeps of an adapter's info. */
static void adapter_info(drt_adapter_info *a, const WGPUAdapterInfo *info) {
    copy_sv(a->vendor, sizeof a->vendor, info->vendor);
    copy_sv(a->architecture, sizeof a->architecture, info->architecture);
    copy_sv(a->device_name, sizeof a->device_name, info->device);
    copy_sv(a->description, sizeof a->description, info->description);
    a->backend_type = (uint32_t)info->backendType;
    a->adapter_type = (uint32_t)info->adapterType;
    a->vendor_id = info->vendorID;
    a->device_id = info->deviceID;
    a->subgroup_min = info->subgroupMinSize;
    a->subgroup_max = info->subgroupMaxSize;
}

static const char *error_type_name(uint32_t t) {
    switch (t) {
    case WGPUErrorType_Validation: return "validation error";
    case WGPUErrorType_OutOfMemory: return "out of memory";
    case WGPUErrorType_Internal: return "internal error";
    default: return "unknown error";
    }
}

/* ---- Dawn's instance descriptor ------------------------------------------------------ */

/*
 * Dawn's DawnInstanceDescriptor (dawn/native/DawnNative.h): a C++ struct that dawn.json does not
 * describe, chained to the instance descriptor for one member, the instance's logging callback,
 * without which Dawn prints what it meets while looking for adapters (the Vulkan loader's
 * "Found no drivers!", adapters it rejects) to stderr. Its layout was read from the library:
 * the constructor dawn::native::DawnInstanceDescriptor::DawnInstanceDescriptor() writes sType
 * 0x00050006 at 8, 0 at 12, 0 at 24, backend validation level 2 (Disabled) at 32, and zeros
 * from 40 to 72; operator== compares 0, 12, 16, 24, 32 and the byte at 36. drt_load runs that
 * constructor on a poisoned buffer and uses the struct only when the library writes exactly
 * this (another revision may differ); TestRuntimeLogger checks the callback at 40 is the one
 * Dawn calls.
 */
typedef struct drt_instance_desc {
    WGPUChainedStruct *next;                       /* 0 */
    uint32_t stype;                                /* 8: 0x00050006 */
    uint32_t additional_runtime_search_path_count; /* 12 */
    const char *const *additional_runtime_search_paths; /* 16 */
    void *platform;                                /* 24 */
    uint32_t backend_validation_level;             /* 32 */
    uint8_t begin_capture_on_startup;              /* 36 */
    WGPULoggingCallbackInfo logging;               /* 40 */
} drt_instance_desc;
typedef char drt_instance_desc_is_72_bytes[sizeof(drt_instance_desc) == 72 ? 1 : -1];
typedef char drt_instance_desc_logging_at_40[offsetof(drt_instance_desc, logging) == 40 ? 1 : -1];

#define DRT_INSTANCE_DESC_CTOR "_ZN4dawn6native22DawnInstanceDescriptorC1Ev"

/* instance_desc_ok reports whether ctor builds exactly the layout of drt_instance_desc. */
static int instance_desc_ok(void (*ctor)(void *)) {
    unsigned char buf[128];
    uint32_t u32;
    uint64_t u64;
    size_t i;
    memset(buf, 0xAA, sizeof buf);
    ctor(buf);
    memcpy(&u64, buf + 0, 8);
    if (u64 != 0) return 0;
    memcpy(&u32, buf + 8, 4);
    if (u32 != 0x00050006u) return 0;
    memcpy(&u32, buf + 12, 4);
    if (u32 != 0) return 0;
    memcpy(&u64, buf + 24, 8);
    if (u64 != 0) return 0;
    memcpy(&u32, buf + 32, 4);
    if (u32 != 2 || buf[36] != 0) return 0;
    for (i = 40; i < sizeof(drt_instance_desc); i++)
        if (buf[i] != 0) return 0;
    for (i = sizeof(drt_instance_desc); i < sizeof buf; i++)
        if (buf[i] != 0xAA) return 0;
    return 1;
}

/* ---- adapter enumeration ----------------------------------------------------------------- */

/*
 * Dawn's C API requests one adapter; the C++ one, dawn::native::Instance::EnumerateAdapters
 * (dawn/native/DawnNative.h), lists them all. Its ABI, read from the library (libstdc++,
 * x86-64 SysV): Instance and Adapter each hold one pointer (InstanceBase*, AdapterBase*, the
 * objects behind WGPUInstance and WGPUAdapter); the std::vector<Adapter> result is returned
 * through a hidden pointer passed before `this`, as begin, end and end of storage. Each
 * element holds a reference the Adapter destructor drops; the storage is freed with operator
 * delete. Used only when every symbol resolves.
 */
typedef struct drt_adapter_vec {
    WGPUAdapter *begin, *end, *cap;
} drt_adapter_vec;

static void load_enumerate(void *h, drt_procs *p) {
    *(void **)(&p->instance_ctor) = dlsym(h, "_ZN4dawn6native8InstanceC1EPNS0_12InstanceBaseE");
    *(void **)(&p->instance_dtor) = dlsym(h, "_ZN4dawn6native8InstanceD1Ev");
    *(void **)(&p->enumerate) = dlsym(h, "_ZNK4dawn6native8Instance17EnumerateAdaptersEPK25WGPURequestAdapterOptions");
    *(void **)(&p->adapter_dtor) = dlsym(h, "_ZN4dawn6native7AdapterD1Ev");
    *(void **)(&p->op_delete) = dlsym(h, "_ZdlPv");
    *(void **)(&p->adapter_add_ref) = dlsym(h, "wgpuAdapterAddRef");
    if (!p->instance_ctor || !p->instance_dtor || !p->enumerate || !p->adapter_dtor || !p->op_delete ||
        !p->adapter_add_ref) {
        p->instance_ctor = NULL;
        p->instance_dtor = NULL;
        p->enumerate = NULL;
        p->adapter_dtor = NULL;
        p->op_delete = NULL;
        p->adapter_add_ref = NULL;
    }
}

/* The options drt_open requests its adapter with: Vulkan by name (a default request silently
 * falls back to the Null backend). */
static void vulkan_options(WGPURequestAdapterOptions *ao) {
    memset(ao, 0, sizeof *ao);
    ao->featureLevel = WGPUFeatureLevel_Core;
    ao->powerPreference = WGPUPowerPreference_HighPerformance;
    ao->backendType = WGPUBackendType_Vulkan;
}

/* enumerate_adapters lists inst's Vulkan adapters into v; free_adapters drops them. */
static void enumerate_adapters(const drt_procs *p, WGPUInstance inst, drt_adapter_vec *v) {
    void *self[4] = {0}; /* a dawn::native::Instance: one pointer, room to spare */
    WGPURequestAdapterOptions ao;
    vulkan_options(&ao);
    memset(v, 0, sizeof *v);
    p->instance_ctor(self, inst);
    p->enumerate(v, self, &ao);
    p->instance_dtor(self);
}

static void free_adapters(const drt_procs *p, drt_adapter_vec *v) {
    WGPUAdapter *a;
    for (a = v->begin; a != NULL && a < v->end; a++) p->adapter_dtor(a);
    if (v->begin != NULL) p->op_delete(v->begin);
    memset(v, 0, sizeof *v);
}

/* ---- loading ---------------------------------------------------------------------------- */

int drt_load(const char *const *candidates, int n, drt_lib *lib, char *report, size_t cap) {
    int i;
    if (report && cap) report[0] = 0;
    for (i = 0; i < n; i++) {
        const char *c = candidates[i];
        void *h;
        const char *missing = NULL;
        drt_procs p;
        struct stat st;
        if (strchr(c, '/') != NULL && stat(c, &st) != 0) {
            append(report, cap, "%s: no such file\n", c);
            continue;
        }
        h = dlopen(c, RTLD_NOW | RTLD_LOCAL);
        if (h == NULL) {
            const char *e = dlerror();
            append(report, cap, "%s: %s\n", c, e ? e : "dlopen failed");
            continue;
        }
        memset(&p, 0, sizeof p);
#define DRT_REQ(name)                                                                                 \
    if (missing == NULL) {                                                                            \
        *(void **)(&p.name) = dlsym(h, "wgpu" #name);                                                 \
        if (p.name == NULL) missing = "wgpu" #name;                                                   \
    }
#define DRT_OPT(name) *(void **)(&p.name) = dlsym(h, "wgpu" #name);
        WGPU_GEN_PROCS(DRT_REQ, DRT_OPT)
#undef DRT_REQ
#undef DRT_OPT
        if (missing != NULL) {
            append(report, cap, "%s: not a usable Dawn: missing %s\n", c, missing);
            dlclose(h);
            continue;
        }
        load_enumerate(h, &p);
        *(void **)(&p.instance_desc_ctor) = dlsym(h, DRT_INSTANCE_DESC_CTOR);
        if (p.instance_desc_ctor != NULL && !instance_desc_ok(p.instance_desc_ctor)) p.instance_desc_ctor = NULL;
        lib->p = p;
        fmt(lib->path, sizeof lib->path, "%s", c);
        {
            Dl_info di;
            if (dladdr(*(void **)(&p.CreateInstance), &di) != 0 && di.dli_fname != NULL && di.dli_fname[0] == '/')
                fmt(lib->path, sizeof lib->path, "%s", di.dli_fname);
        }
        return DRT_OK;
    }
    return DRT_EUNAVAILABLE;
}

/* ---- callbacks: they only write into C memory named by userdata1 ------------------------- */

static void set_status(drt_status *s, uint32_t status, uint32_t type, WGPUStringView msg) {
    s->status = status;
    s->type = type;
    copy_sv(s->msg, sizeof s->msg, msg);
    s->done = 1;
}

static void on_adapter(WGPURequestAdapterStatus status, WGPUAdapter adapter, WGPUStringView msg, void *u1,
                       void *u2) {
    *(WGPUAdapter *)u2 = adapter;
    set_status((drt_status *)u1, (uint32_t)status, 0, msg);
}

static void on_device(WGPURequestDeviceStatus status, WGPUDevice device, WGPUStringView msg, void *u1, void *u2) {
    *(WGPUDevice *)u2 = device;
    set_status((drt_status *)u1, (uint32_t)status, 0, msg);
}

static void on_map(WGPUMapAsyncStatus status, WGPUStringView msg, void *u1, void *u2) {
    (void)u2;
    set_status((drt_status *)u1, (uint32_t)status, 0, msg);
}

static void on_pop(WGPUPopErrorScopeStatus status, WGPUErrorType type, WGPUStringView msg, void *u1, void *u2) {
    (void)u2;
    set_status((drt_status *)u1, (uint32_t)status, (uint32_t)type, msg);
}

static void on_lost(WGPUDevice const *device, WGPUDeviceLostReason reason, WGPUStringView msg, void *u1, void *u2) {
    drt_device *d = (drt_device *)u1;
    (void)device;
    (void)u2;
    d->lost_reason = (uint32_t)reason;
    copy_sv(d->lost_msg, sizeof d->lost_msg, msg);
    __atomic_store_n(&d->lost, 1, __ATOMIC_RELEASE);
}

static void on_log(WGPULoggingType type, WGPUStringView msg, void *u1, void *u2) {
    drt_device *d = (drt_device *)u1;
    uint64_t slot;
    (void)u2;
    while (__atomic_test_and_set(&d->log_lock, __ATOMIC_ACQUIRE)) {
    }
    slot = d->log_written % DRT_LOG_SLOTS;
    d->log_type[slot] = (uint32_t)type;
    copy_sv(d->log_msg[slot], sizeof d->log_msg[slot], msg);
    __atomic_store_n(&d->log_written, d->log_written + 1, __ATOMIC_RELEASE);
    __atomic_clear(&d->log_lock, __ATOMIC_RELEASE);
}

int drt_log_take(drt_device *d, uint64_t seq, uint32_t *type, char *msg, size_t cap) {
    int rc = DRT_OK;
    while (__atomic_test_and_set(&d->log_lock, __ATOMIC_ACQUIRE)) {
    }
    if (seq >= d->log_written || d->log_written - seq > DRT_LOG_SLOTS) {
        rc = DRT_EUNAVAILABLE;
    } else {
        *type = d->log_type[seq % DRT_LOG_SLOTS];
        fmt(msg, cap, "%s", d->log_msg[seq % DRT_LOG_SLOTS]);
    }
    __atomic_clear(&d->log_lock, __ATOMIC_RELEASE);
    return rc;
}

int drt_force_loss(drt_device *d, const char *msg, char *err, size_t cap) {
    if (d->p->DeviceForceLoss == NULL)
        return fail(DRT_EUNAVAILABLE, err, cap, "the library has no wgpuDeviceForceLoss");
    d->p->DeviceForceLoss(d->device, WGPUDeviceLostReason_Unknown, sv(msg));
    d->p->InstanceProcessEvents(d->instance);
    return DRT_OK;
}

static void on_uncaptured(WGPUDevice const *device, WGPUErrorType type, WGPUStringView msg, void *u1, void *u2) {
    drt_device *d = (drt_device *)u1;
    (void)device;
    (void)type;
    (void)u2;
    copy_sv(d->uncaptured_msg, sizeof d->uncaptured_msg, msg);
    d->uncaptured++;
}

static WGPUWaitStatus wait_one(drt_device *d, WGPUFuture f, uint64_t timeout_ns) {
    WGPUFutureWaitInfo w;
    w.future = f;
    w.completed = 0;
    return d->p->InstanceWaitAny(d->instance, 1, &w, timeout_ns);
}

/* ---- error scopes ------------------------------------------------------------------------ */

static void scopes_push(drt_device *d) {
    d->p->DevicePushErrorScope(d->device, WGPUErrorFilter_Validation);
    d->p->DevicePushErrorScope(d->device, WGPUErrorFilter_OutOfMemory);
    d->p->DevicePushErrorScope(d->device, WGPUErrorFilter_Internal);
}

/* scopes_pop_wait pops the three scopes and returns the first error among them, formatted
   "<what>: <kind>: <message>". */
static int scopes_pop_wait(drt_device *d, const char *what, char *err, size_t cap) {
    drt_status s[3];
    WGPUFuture f[3];
    int i;
    for (i = 0; i < 3; i++) {
        WGPUPopErrorScopeCallbackInfo ci;
        memset(&ci, 0, sizeof ci);
        memset(&s[i], 0, sizeof s[i]);
        ci.mode = WGPUCallbackMode_WaitAnyOnly;
        ci.callback = on_pop;
        ci.userdata1 = &s[i];
        f[i] = d->p->DevicePopErrorScope(d->device, ci);
    }
    for (i = 0; i < 3; i++) {
        if (wait_one(d, f[i], DRT_SCOPE_WAIT_NS) != WGPUWaitStatus_Success)
            return fail(DRT_EDEVICE, err, cap, "%s: waiting for the error scope failed", what);
    }
    /* Validation was pushed first and so popped last; report it first, it explains the others. */
    for (i = 2; i >= 0; i--) {
        if (!s[i].done) return fail(DRT_EDEVICE, err, cap, "%s: error scope never resolved", what);
        if (s[i].status != WGPUPopErrorScopeStatus_Success)
            return fail(DRT_EDEVICE, err, cap, "%s: pop error scope failed: %s", what, s[i].msg);
        if (s[i].type != WGPUErrorType_NoError)
            return fail(DRT_EDEVICE, err, cap, "%s: %s: %s", what, error_type_name(s[i].type), s[i].msg);
    }
    return DRT_OK;
}

/* ---- device ------------------------------------------------------------------------------ */

/* WGPUDawnTogglesDescriptor of dawn.json (not in the generated header): chained on the device
   descriptor; unknown toggle names are ignored. */
typedef struct {
    WGPUChainedStruct chain;
    size_t enabledToggleCount;
    const char *const *enabledToggles;
    size_t disabledToggleCount;
    const char *const *disabledToggles;
} drt_toggles;

/* fail_open formats err, releases what drt_open_adapter built and returns DRT_EUNAVAILABLE. Called in that
   frame, so callbacks the release runs still find their targets (st, adapter, device) alive. */
static int fail_open(drt_device *d, char *err, size_t cap, const char *format, ...) {
    va_list ap;
    va_start(ap, format);
    vfmt(err, cap, format, ap);
    va_end(ap);
    drt_close(d);
    return DRT_EUNAVAILABLE;
}

/* create_instance makes d's instance, its log going to d's ring. */
static int create_instance(const drt_procs *p, drt_device *d, char *err, size_t cap) {
    WGPUInstanceDescriptor idesc;
    drt_instance_desc dawn_desc;
    memset(&idesc, 0, sizeof idesc);
    idesc.capabilities.timedWaitAnyEnable = 1; /* without it a timed WaitAny is an error */
    if (p->instance_desc_ctor != NULL) { /* the instance's log goes where the device's goes */
        p->instance_desc_ctor(&dawn_desc);
        dawn_desc.logging.callback = on_log;
        dawn_desc.logging.userdata1 = d;
        idesc.nextInChain = (WGPUChainedStruct *)&dawn_desc;
    }
    d->instance = p->CreateInstance(&idesc);
    if (d->instance == NULL) return fail(DRT_EUNAVAILABLE, err, cap, "wgpuCreateInstance failed");
    return DRT_OK;
}

int drt_adapters(const drt_procs *p, drt_adapter_info *out, int cap_out, int *n, char *err, size_t cap) {
    drt_device *d;
    drt_adapter_vec v;
    WGPUAdapterInfo info;
    int i, rc;
    *n = 0;
    if (p->enumerate == NULL)
        return fail(DRT_EUNAVAILABLE, err, cap,
                    "this Dawn library cannot list adapters (no dawn::native::Instance::EnumerateAdapters)");
    d = (drt_device *)calloc(1, sizeof *d);
    if (d == NULL) return fail(DRT_EUNAVAILABLE, err, cap, "out of memory");
    d->p = p;
    if ((rc = create_instance(p, d, err, cap)) != DRT_OK) {
        free(d);
        return rc;
    }
    enumerate_adapters(p, d->instance, &v);
    for (i = 0; v.begin + i < v.end; i++) {
        drt_adapter_info *a;
        if (i >= cap_out) continue;
        a = &out[i];
        memset(a, 0, sizeof *a);
        memset(&info, 0, sizeof info);
        if (p->AdapterGetInfo(v.begin[i], &info) != WGPUStatus_Success) continue;
        adapter_info(a, &info);
        p->AdapterInfoFreeMembers(info);
    }
    *n = i;
    free_adapters(p, &v);
    drt_close(d);
    free(d);
    return DRT_OK;
}

int drt_open_adapter(const drt_procs *p, drt_device *d, int index, uint64_t timeout_ns, char *err, size_t cap) {
    WGPURequestAdapterOptions ao;
    WGPURequestAdapterCallbackInfo aci;
    WGPURequestDeviceCallbackInfo dci;
    WGPUDeviceDescriptor dd;
    drt_toggles toggles;
    static const char *const no_quantization[] = {"timestamp_quantization"};
    WGPUAdapterInfo info;
    WGPULimits al, req;
    WGPUFeatureName wanted[] = DRT_WANTED_FEATURES, features[8];
    size_t nf = 0, i;
    drt_status st;
    WGPUAdapter adapter = NULL;
    WGPUDevice device = NULL;
    WGPUWaitStatus ws;

    memset(d, 0, sizeof *d);
    d->p = p;

    if (create_instance(p, d, err, cap) != DRT_OK) {
        drt_close(d);
        return DRT_EUNAVAILABLE;
    }

    if (index >= 0) {
        drt_adapter_vec v;
        size_t count;
        if (p->enumerate == NULL)
            return fail_open(d, err, cap, "this Dawn library cannot list adapters, so adapter %d cannot be chosen",
                             index);
        enumerate_adapters(p, d->instance, &v);
        count = (size_t)(v.end - v.begin);
        if ((size_t)index >= count) {
            free_adapters(p, &v);
            return fail_open(d, err, cap, "no adapter %d: Dawn lists %zu Vulkan adapter(s)", index, count);
        }
        p->adapter_add_ref(v.begin[index]);
        adapter = v.begin[index];
        free_adapters(p, &v);
        goto have_adapter;
    }

    vulkan_options(&ao);
    memset(&aci, 0, sizeof aci);
    memset(&st, 0, sizeof st);
    aci.mode = WGPUCallbackMode_WaitAnyOnly;
    aci.callback = on_adapter;
    aci.userdata1 = &st;
    aci.userdata2 = &adapter;
    ws = wait_one(d, p->InstanceRequestAdapter(d->instance, &ao, aci), timeout_ns);
    if (ws != WGPUWaitStatus_Success)
        return fail_open(d, err, cap, "waiting for a Vulkan adapter: %s",
                         ws == WGPUWaitStatus_TimedOut ? "timed out" : "wait failed");
    if (st.status != WGPURequestAdapterStatus_Success || adapter == NULL) {
        if (adapter) p->AdapterRelease(adapter);
        return fail_open(d, err, cap, "no Vulkan adapter: %s", st.msg[0] ? st.msg : "(no message)");
    }
have_adapter:
    d->adapter = adapter;

    memset(&info, 0, sizeof info);
    if (p->AdapterGetInfo(adapter, &info) != WGPUStatus_Success)
        return fail_open(d, err, cap, "wgpuAdapterGetInfo failed");
    adapter_info(&d->info, &info);
    p->AdapterInfoFreeMembers(info);
    if (d->info.backend_type == WGPUBackendType_Null)
        return fail_open(d, err, cap, "Dawn offered only its Null backend (no usable Vulkan driver)");

    memset(&al, 0, sizeof al);
    if (p->AdapterGetLimits(adapter, &al) != WGPUStatus_Success)
        return fail_open(d, err, cap, "wgpuAdapterGetLimits failed");
    /* Every limit "undefined" (the default), then raise the ones compute work runs into. */
    memset(&req, 0xFF, sizeof req);
    req.nextInChain = NULL;
    req.maxStorageBufferBindingSize = al.maxStorageBufferBindingSize;
    req.maxUniformBufferBindingSize = al.maxUniformBufferBindingSize;
    req.maxBufferSize = al.maxBufferSize;
    req.maxStorageBuffersPerShaderStage = al.maxStorageBuffersPerShaderStage;
    req.maxUniformBuffersPerShaderStage = al.maxUniformBuffersPerShaderStage;
    req.maxComputeWorkgroupStorageSize = al.maxComputeWorkgroupStorageSize;
    req.maxComputeInvocationsPerWorkgroup = al.maxComputeInvocationsPerWorkgroup;
    req.maxComputeWorkgroupSizeX = al.maxComputeWorkgroupSizeX;
    req.maxComputeWorkgroupSizeY = al.maxComputeWorkgroupSizeY;
    req.maxComputeWorkgroupSizeZ = al.maxComputeWorkgroupSizeZ;
    req.maxComputeWorkgroupsPerDimension = al.maxComputeWorkgroupsPerDimension;
    req.minStorageBufferOffsetAlignment = al.minStorageBufferOffsetAlignment;
    req.minUniformBufferOffsetAlignment = al.minUniformBufferOffsetAlignment;

    for (i = 0; i < sizeof wanted / sizeof wanted[0]; i++) {
        if (p->AdapterHasFeature(adapter, wanted[i])) features[nf++] = wanted[i];
    }

    /* Exact timestamps: Dawn rounds them to 65.536 us unless the device disables
       timestamp_quantization (kernel timing measures single dispatches). */
    memset(&toggles, 0, sizeof toggles);
    toggles.chain.sType = WGPUSType_DawnTogglesDescriptor;
    toggles.disabledToggleCount = sizeof no_quantization / sizeof no_quantization[0];
    toggles.disabledToggles = no_quantization;

    memset(&dd, 0, sizeof dd);
    dd.nextInChain = &toggles.chain;
    dd.label = sv("fusednorm");
    dd.requiredFeatureCount = nf;
    dd.requiredFeatures = features;
    dd.requiredLimits = &req;
    dd.defaultQueue.label = sv(NULL);
    dd.deviceLostCallbackInfo.mode = WGPUCallbackMode_AllowSpontaneous;
    dd.deviceLostCallbackInfo.callback = on_lost;
    dd.deviceLostCallbackInfo.userdata1 = d;
    dd.uncapturedErrorCallbackInfo.callback = on_uncaptured;
    dd.uncapturedErrorCallbackInfo.userdata1 = d;
    memset(&dci, 0, sizeof dci);
    memset(&st, 0, sizeof st);
    dci.mode = WGPUCallbackMode_WaitAnyOnly;
    dci.callback = on_device;
    dci.userdata1 = &st;
    dci.userdata2 = &device;
    ws = wait_one(d, p->AdapterRequestDevice(adapter, &dd, dci), timeout_ns);
    if (ws != WGPUWaitStatus_Success)
        return fail_open(d, err, cap, "waiting for the device: %s",
                         ws == WGPUWaitStatus_TimedOut ? "timed out" : "wait failed");
    if (st.status != WGPURequestDeviceStatus_Success || device == NULL) {
        if (device) p->DeviceRelease(device);
        return fail_open(d, err, cap, "device request failed: %s", st.msg[0] ? st.msg : "(no message)");
    }
    d->device = device;
    if (p->DeviceSetLoggingCallback != NULL) {
        WGPULoggingCallbackInfo li;
        memset(&li, 0, sizeof li);
        li.callback = on_log;
        li.userdata1 = d;
        p->DeviceSetLoggingCallback(device, li);
    }
    d->queue = p->DeviceGetQueue(device);
    memset(&d->limits, 0, sizeof d->limits);
    if (p->DeviceGetLimits(device, &d->limits) != WGPUStatus_Success)
        return fail_open(d, err, cap, "wgpuDeviceGetLimits failed");
    return DRT_OK;
}

void drt_close(drt_device *d) {
    const drt_procs *p = d->p;
    if (p == NULL) return;
    drt_discard(d);
    if (d->queue) p->QueueRelease(d->queue);
    if (d->device) {
        p->DeviceDestroy(d->device);
        p->DeviceRelease(d->device);
    }
    if (d->adapter) p->AdapterRelease(d->adapter);
    if (d->instance) {
        p->InstanceProcessEvents(d->instance);
        p->InstanceRelease(d->instance);
    }
    d->queue = NULL;
    d->device = NULL;
    d->adapter = NULL;
    d->instance = NULL;
}

int drt_has_feature(drt_device *d, uint32_t feature) {
    return d->p->DeviceHasFeature(d->device, (WGPUFeatureName)feature) ? 1 : 0;
}

/* ---- buffers ----------------------------------------------------------------------------- */

int drt_create_buffer(drt_device *d, const char *label, uint64_t size, uint64_t usage, WGPUBuffer *out,
                      char *err, size_t cap) {
    WGPUBufferDescriptor bd;
    WGPUBuffer b;
    char what[320];
    int rc;
    memset(&bd, 0, sizeof bd);
    bd.label = sv(label);
    bd.usage = (WGPUBufferUsage)usage;
    bd.size = size;
    fmt(what, sizeof what, "create buffer %s", label ? label : "");
    scopes_push(d);
    b = d->p->DeviceCreateBuffer(d->device, &bd);
    rc = scopes_pop_wait(d, what, err, cap);
    if (rc == DRT_OK && b == NULL) return fail(DRT_EDEVICE, err, cap, "%s: Dawn returned no buffer", what);
    if (rc != DRT_OK) {
        if (b) d->p->BufferRelease(b);
        return rc;
    }
    *out = b;
    return DRT_OK;
}

void drt_buffer_release(drt_device *d, WGPUBuffer b) {
    if (b) d->p->BufferRelease(b);
}

/* ---- pipelines --------------------------------------------------------------------------- */

int drt_create_pipeline(drt_device *d, const char *label, const char *wgsl, size_t wgsl_len, const char *entry,
                        WGPUComputePipeline *out, WGPUBindGroupLayout *bgl, char *err, size_t cap) {
    WGPUShaderSourceWGSL src;
    WGPUShaderModuleDescriptor smd;
    WGPUComputePipelineDescriptor cpd;
    WGPUShaderModule sm;
    WGPUComputePipeline pl;
    WGPUBindGroupLayout layout;
    char what[320], ignored[64];
    int rc;

    memset(&src, 0, sizeof src);
    src.chain.sType = WGPUSType_ShaderSourceWGSL;
    src.code.data = wgsl;
    src.code.length = wgsl_len;
    memset(&smd, 0, sizeof smd);
    smd.nextInChain = &src.chain;
    smd.label = sv(label);
    memset(&cpd, 0, sizeof cpd);
    cpd.label = sv(label);
    cpd.layout = NULL; /* automatic layout from the entry point's bindings */
    cpd.compute.entryPoint = sv(entry);
    fmt(what, sizeof what, "compile %s", label ? label : "");

    scopes_push(d);
    sm = d->p->DeviceCreateShaderModule(d->device, &smd);
    cpd.compute.module = sm;
    pl = d->p->DeviceCreateComputePipeline(d->device, &cpd);
    rc = scopes_pop_wait(d, what, err, cap);
    if (sm) d->p->ShaderModuleRelease(sm);
    if (rc == DRT_OK && pl == NULL) return fail(DRT_EDEVICE, err, cap, "%s: Dawn returned no pipeline", what);
    if (rc != DRT_OK) {
        if (pl) d->p->ComputePipelineRelease(pl);
        return rc;
    }
    /* A shader without bindings has no group 0; that is not an error until Run binds something. */
    scopes_push(d);
    layout = d->p->ComputePipelineGetBindGroupLayout(pl, 0);
    if (scopes_pop_wait(d, "bind group layout", ignored, sizeof ignored) != DRT_OK) {
        if (layout) d->p->BindGroupLayoutRelease(layout);
        layout = NULL;
    }
    *out = pl;
    *bgl = layout;
    return DRT_OK;
}

void drt_pipeline_release(drt_device *d, WGPUComputePipeline pl, WGPUBindGroupLayout bgl) {
    if (bgl) d->p->BindGroupLayoutRelease(bgl);
    if (pl) d->p->ComputePipelineRelease(pl);
}

int drt_create_query_set(drt_device *d, uint32_t count, WGPUQuerySet *out, char *err, size_t cap) {
    WGPUQuerySetDescriptor qd;
    WGPUQuerySet qs;
    int rc;
    if (d->p->DeviceCreateQuerySet == NULL || d->p->CommandEncoderResolveQuerySet == NULL ||
        d->p->QuerySetRelease == NULL)
        return fail(DRT_EDEVICE, err, cap, "create query set: the library lacks query set functions");
    memset(&qd, 0, sizeof qd);
    qd.label = sv("fusednorm timestamps");
    qd.type = WGPUQueryType_Timestamp;
    qd.count = count;
    scopes_push(d);
    qs = d->p->DeviceCreateQuerySet(d->device, &qd);
    rc = scopes_pop_wait(d, "create query set", err, cap);
    if (rc == DRT_OK && qs == NULL) return fail(DRT_EDEVICE, err, cap, "create query set: Dawn returned none");
    if (rc != DRT_OK) {
        if (qs) d->p->QuerySetRelease(qs);
        return rc;
    }
    *out = qs;
    return DRT_OK;
}

void drt_query_set_release(drt_device *d, WGPUQuerySet qs) {
    if (qs == NULL) return;
    if (d->p->QuerySetDestroy) d->p->QuerySetDestroy(qs);
    d->p->QuerySetRelease(qs);
}

/* ---- the executor ------------------------------------------------------------------------ */

/* drt_status of a queue-done future is marked with type 1, of a map with type 0: both
   successes are 1, so drt_wait_error tells them apart only to word its message. */
static void on_work_done(WGPUQueueWorkDoneStatus status, WGPUStringView msg, void *u1, void *u2) {
    (void)u2;
    set_status((drt_status *)u1, (uint32_t)status, 1, msg);
}

int drt_bind_group(drt_device *d, WGPUBindGroupLayout bgl, const drt_binding *binds, int n, WGPUBindGroup *out,
                   char *err, size_t cap) {
    WGPUBindGroupEntry entries[DRT_MAX_BINDINGS];
    WGPUBindGroupDescriptor bgd;
    WGPUBindGroup bg;
    int i, rc;
    if (bgl == NULL) return fail(DRT_EDEVICE, err, cap, "bind group: %d bindings for a layout that is absent", n);
    if (n <= 0 || n > DRT_MAX_BINDINGS)
        return fail(DRT_EDEVICE, err, cap, "bind group: %d bindings for a layout that takes 1 to %d", n,
                    DRT_MAX_BINDINGS);
    memset(entries, 0, sizeof entries);
    for (i = 0; i < n; i++) {
        entries[i].binding = binds[i].binding;
        entries[i].buffer = binds[i].buffer;
        entries[i].offset = binds[i].offset;
        entries[i].size = binds[i].size;
    }
    memset(&bgd, 0, sizeof bgd);
    bgd.label = sv(NULL);
    bgd.layout = bgl;
    bgd.entryCount = (size_t)n;
    bgd.entries = entries;
    scopes_push(d);
    bg = d->p->DeviceCreateBindGroup(d->device, &bgd);
    rc = scopes_pop_wait(d, "bind group", err, cap);
    if (rc == DRT_OK && bg == NULL) return fail(DRT_EDEVICE, err, cap, "bind group: Dawn returned none");
    if (rc != DRT_OK) {
        if (bg) d->p->BindGroupRelease(bg);
        return rc;
    }
    *out = bg;
    return DRT_OK;
}

void drt_bind_group_release(drt_device *d, WGPUBindGroup bg) {
    if (bg) d->p->BindGroupRelease(bg);
}

void drt_queue_write(drt_device *d, WGPUBuffer b, uint64_t offset, const void *data, size_t n) {
    size_t head = n & ~(size_t)3, tail = n - head;
    if (head > 0) d->p->QueueWriteBuffer(d->queue, b, offset, data, head);
    if (tail > 0) {
        uint8_t pad[4] = {0, 0, 0, 0};
        memcpy(pad, (const uint8_t *)data + head, tail);
        d->p->QueueWriteBuffer(d->queue, b, offset + head, pad, 4);
    }
}

/* end_pass ends the compute pass left open in d->enc, if any. */
static void end_pass(drt_device *d) {
    if (d->pass == NULL) return;
    d->p->ComputePassEncoderEnd(d->pass);
    d->p->ComputePassEncoderRelease(d->pass);
    d->pass = NULL;
}

/* encode_pass records c's dispatch: timing->repeat of them in a pass of their own between
   begin and end timestamps when timing is given, else one into the open pass (begun, labelled
   after c, when none is open). A BERT-sized chain's calls ran 0.1-0.5 us faster each with
   one pass than with a pass each, on an H100 (docs/performance.md, "Chains"). */
static void encode_pass(drt_device *d, const drt_call *c) {
    const drt_procs *p = d->p;
    WGPUComputePassDescriptor pd;
    WGPUPassTimestampWrites tw;
    const drt_timing *timing = c->timing;
    uint32_t k, repeat = timing != NULL && timing->repeat > 1 ? timing->repeat : 1;
    if (timing != NULL) end_pass(d);
    if (d->pass == NULL) {
        memset(&pd, 0, sizeof pd);
        pd.label = sv(c->label);
        if (timing != NULL) {
            memset(&tw, 0, sizeof tw);
            tw.querySet = timing->query_set;
            tw.beginningOfPassWriteIndex = 0;
            tw.endOfPassWriteIndex = 1;
            pd.timestampWrites = &tw;
        }
        d->pass = p->CommandEncoderBeginComputePass(d->enc, &pd);
    }
    p->ComputePassEncoderSetPipeline(d->pass, c->pl);
    if (c->bg) p->ComputePassEncoderSetBindGroup(d->pass, 0, c->bg, 0, NULL);
    for (k = 0; k < repeat; k++)
        p->ComputePassEncoderDispatchWorkgroups(d->pass, c->groups[0], c->groups[1], c->groups[2]);
    if (timing != NULL) end_pass(d);
}

/* encode_copies records n copies into d->enc, ending the open pass first (a copy is not a pass
   command). */
static void encode_copies(drt_device *d, const drt_copy *c, int n) {
    int i;
    if (n > 0) end_pass(d);
    for (i = 0; i < n; i++)
        d->p->CommandEncoderCopyBufferToBuffer(d->enc, c[i].src, c[i].src_offset, c[i].dst, c[i].dst_offset,
                                               c[i].size);
}

int drt_record(drt_device *d, const drt_call *c, char *err, size_t cap) {
    const drt_procs *p = d->p;
    int i;
    if (c->timing != NULL && c->pl == NULL) return fail(DRT_EDEVICE, err, cap, "record: timing without a dispatch");
    if (d->enc == NULL) d->enc = p->DeviceCreateCommandEncoder(d->device, NULL);
    encode_copies(d, c->copies, c->npre);
    if (c->pl != NULL) encode_pass(d, c);
    encode_copies(d, c->copies + c->npre, c->npost);
    if (c->timing != NULL) { /* its pass has ended */
        p->CommandEncoderResolveQuerySet(d->enc, c->timing->query_set, 0, 2, c->timing->resolve, 0);
        p->CommandEncoderCopyBufferToBuffer(d->enc, c->timing->resolve, 0, c->timing->staging, 0, 16);
    }
    if (c->nreads > 0) end_pass(d);
    for (i = 0; i < c->nreads; i++)
        p->CommandEncoderCopyBufferToBuffer(d->enc, c->reads[i].src, c->reads[i].src_offset, c->reads[i].staging, 0,
                                            c->reads[i].size);
    return DRT_OK;
}

static void wait_add(drt_wait *w, WGPUFuture f) { w->fut[w->n++] = f; }

int drt_flush(drt_device *d, drt_status *scope, const drt_map *maps, int nmaps, drt_wait *w, char *err, size_t cap) {
    const drt_procs *p = d->p;
    WGPUCommandBuffer cb;
    int i;
    if (nmaps > 0 && w == NULL) return fail(DRT_EDEVICE, err, cap, "flush: maps without a wait");
    if (nmaps > DRT_WAIT_CAP) return fail(DRT_EDEVICE, err, cap, "flush: %d maps, over %d", nmaps, DRT_WAIT_CAP);
    if (d->enc != NULL) {
        end_pass(d);
        if (scope != NULL) p->DevicePushErrorScope(d->device, WGPUErrorFilter_Validation);
        cb = p->CommandEncoderFinish(d->enc, NULL);
        p->QueueSubmit(d->queue, 1, &cb);
        p->CommandBufferRelease(cb);
        p->CommandEncoderRelease(d->enc);
        d->enc = NULL;
        if (scope != NULL) {
            WGPUPopErrorScopeCallbackInfo ci;
            memset(&ci, 0, sizeof ci);
            memset(scope, 0, sizeof *scope);
            ci.mode = WGPUCallbackMode_AllowProcessEvents;
            ci.callback = on_pop;
            ci.userdata1 = scope;
            (void)p->DevicePopErrorScope(d->device, ci);
        }
    }
    if (w == NULL) return DRT_OK;
    w->n = 0;
    memset(w->st, 0, sizeof w->st);
    for (i = 0; i < nmaps; i++) {
        WGPUBufferMapCallbackInfo mi;
        memset(&mi, 0, sizeof mi);
        mi.mode = WGPUCallbackMode_WaitAnyOnly;
        mi.callback = on_map;
        mi.userdata1 = &w->st[w->n];
        wait_add(w, p->BufferMapAsync(maps[i].buf, maps[i].write ? WGPUMapMode_Write : WGPUMapMode_Read, 0,
                                      (size_t)maps[i].size, mi));
    }
    if (nmaps == 0) {
        WGPUQueueWorkDoneCallbackInfo wi;
        memset(&wi, 0, sizeof wi);
        wi.mode = WGPUCallbackMode_WaitAnyOnly;
        wi.callback = on_work_done;
        wi.userdata1 = &w->st[0];
        wait_add(w, p->QueueOnSubmittedWorkDone(d->queue, wi));
    }
    return DRT_OK;
}

void drt_discard(drt_device *d) {
    if (d->enc != NULL) {
        end_pass(d);
        d->p->CommandEncoderRelease(d->enc);
        d->enc = NULL;
    }
}

int drt_wait_all(drt_device *d, drt_wait *w, uint64_t timeout_ns, char *err, size_t cap) {
    int i;
    for (i = 0; i < w->n; i++) {
        WGPUWaitStatus ws;
        if (w->st[i].done) continue;
        ws = wait_one(d, w->fut[i], timeout_ns);
        if (ws == WGPUWaitStatus_TimedOut) return DRT_ETIMEOUT;
        if (ws != WGPUWaitStatus_Success)
            return fail(DRT_EDEVICE, err, cap, "wgpuInstanceWaitAny failed (status %u)", (unsigned)ws);
    }
    return DRT_OK;
}

int drt_wait_error(const drt_wait *w, char *err, size_t cap) {
    int i;
    for (i = 0; i < w->n; i++) {
        /* WGPUMapAsyncStatus_Success and WGPUQueueWorkDoneStatus_Success are both 1. */
        if (w->st[i].status != 1)
            return fail(DRT_EDEVICE, err, cap, "%s: status %u: %s", w->st[i].type ? "queue work done" : "map",
                        (unsigned)w->st[i].status, w->st[i].msg);
    }
    return DRT_OK;
}

void *drt_mapped(drt_device *d, WGPUBuffer b, int write, uint64_t size) {
    if (write) return d->p->BufferGetMappedRange(b, 0, (size_t)size);
    return (void *)d->p->BufferGetConstMappedRange(b, 0, (size_t)size);
}

int drt_copy_mapped(drt_device *d, WGPUBuffer staging, void *dst, size_t n, char *err, size_t cap) {
    const void *src;
    if (n == 0) return DRT_OK;
    src = drt_mapped(d, staging, 0, (n + 3) & ~(uint64_t)3);
    if (src == NULL) return fail(DRT_EDEVICE, err, cap, "read-back: no mapped range");
    memcpy(dst, src, n);
    return DRT_OK;
}

void drt_unmap(drt_device *d, WGPUBuffer b) {
    if (b) d->p->BufferUnmap(b);
}

void drt_process_events(drt_device *d) { d->p->InstanceProcessEvents(d->instance); }
