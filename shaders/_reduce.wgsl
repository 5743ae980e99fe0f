// Library: workgroup-wide reductions over WG invocations (WG, a power of two, is the op file's override).
// Call from uniform control flow only: every invocation of the workgroup must reach each barrier.

var<workgroup> partial: array<f32, WG>;
var<workgroup> partial_index: array<u32, WG>;

fn reduce_sum(value: f32, lid: u32) -> f32 {
    partial[lid] = value;
    workgroupBarrier();
    for (var width = WG / 2u; width > 0u; width = width / 2u) {
        if (lid < width) { partial[lid] += partial[lid + width]; }
        workgroupBarrier();
    }
    let total = partial[0];
    workgroupBarrier();  // the next reduction may overwrite partial
    return total;
}

fn reduce_max(value: f32, lid: u32) -> f32 {
    partial[lid] = value;
    workgroupBarrier();
    for (var width = WG / 2u; width > 0u; width = width / 2u) {
        if (lid < width) { partial[lid] = max(partial[lid], partial[lid + width]); }
        workgroupBarrier();
    }
    let best = partial[0];
    workgroupBarrier();
    return best;
}

// (value, index) pairs ordered by value descending, then index ascending (ties go to the lower index).
fn ranks_before(v: f32, i: u32, w: f32, j: u32) -> bool {
    return v > w || (v == w && i < j);
}

// The best (value, index) pair of the workgroup; invocations with nothing to offer pass index 0xffffffff.
fn reduce_best(value: f32, index: u32, lid: u32) -> vec2<u32> {
    partial[lid] = value;
    partial_index[lid] = index;
    workgroupBarrier();
    for (var width = WG / 2u; width > 0u; width = width / 2u) {
        if (lid < width && ranks_before(partial[lid + width], partial_index[lid + width], partial[lid], partial_index[lid])) {
            partial[lid] = partial[lid + width];
            partial_index[lid] = partial_index[lid + width];
        }
        workgroupBarrier();
    }
    let best = vec2<u32>(bitcast<u32>(partial[0]), partial_index[0]);
    workgroupBarrier();
    return best;
}
