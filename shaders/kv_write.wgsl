// kv_write: k_cache[slots[t]] = k[t]; v_cache[slots[t]] = v[t], in place   reference: tests/reference.py::kv_write
// bindings: k, v (T, Hkv, Dh) rows k_stride / v_stride apart, slots (T,) i32 -> k_cache, v_cache
// (S, Hkv, Dh) read_write; params
// grid: (ceil(Hkv * Dh / WG), T)
alias T = f32;
override WG: u32 = 64;

struct Params {
    row: u32,           // Hkv * Dh
    k_off: u32,
    k_stride: u32,
    v_off: u32,
    v_stride: u32,
    slots_off: u32,
    k_cache_off: u32,
    v_cache_off: u32,
}

@group(0) @binding(0) var<storage, read> k: array<T>;
@group(0) @binding(1) var<storage, read> v: array<T>;
@group(0) @binding(2) var<storage, read> slots: array<i32>;
@group(0) @binding(3) var<storage, read_write> k_cache: array<T>;
@group(0) @binding(4) var<storage, read_write> v_cache: array<T>;
@group(0) @binding(5) var<uniform> params: Params;

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let e = wid.x * WG + lid;
    let t = wid.y;
    if (e >= params.row) { return; }
    let dst = u32(slots[params.slots_off + t]) * params.row + e;
    k_cache[params.k_cache_off + dst] = k[params.k_off + t * params.k_stride + e];
    v_cache[params.v_cache_off + dst] = v[params.v_off + t * params.v_stride + e];
}

// entry k_only: k_cache[slots[t]] = k[t] alone, for a cache array that serves as keys and values (multi-head
// latent attention): the same buffer cannot be bound writable twice
@compute @workgroup_size(WG)
fn k_only(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let e = wid.x * WG + lid;
    let t = wid.y;
    if (e >= params.row) { return; }
    let dst = u32(slots[params.slots_off + t]) * params.row + e;
    k_cache[params.k_cache_off + dst] = k[params.k_off + t * params.k_stride + e];
}
