/* test_tier.c — the tier decision (experts/tier.c) from (RAM, model sizes)
 * pairs: resident when experts fit, streaming with C from the budget, the
 * smallest of physical / cgroup / QWISP_DEVICE_RAM wins, an explicit
 * QWISP_RAW_C (0 = resident, n clamped to [top-k, n_expert]), the minimum
 * C = top-k, and QWISP_DEVICE_RAM parsing. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "qwisp/experts.h"

#include <string.h>

#define GB 1000000000ull
#define MB 1000000ull

/* A 30B-A3B-like model: 48 layers x 128 experts (top-8), 16 GB of experts,
 * 1 GB of other weights, slots of 16 GB / (48*128). */
static qw_tier_input model(void) {
    qw_tier_input in = {0};
    in.n_layer = 48;
    in.n_expert = 128;
    in.n_expert_used = 8;
    in.expert_bytes = 16 * GB;
    in.nonexpert_bytes = 1 * GB;
    in.kv_bytes = 400 * MB;
    in.slot_bytes = in.expert_bytes / (48 * 128);
    in.raw_c = -1;
    return in;
}

static void test_resident_when_it_fits(void **st) {
    qw_tier_input in = model();
    in.ram_phys = 64 * GB;
    qw_tier_decision d;
    qw_tier_decide(&in, &d);
    assert_int_equal(d.tier, QW_TIER_RESIDENT);
    assert_int_equal(d.c, 128);
    assert_non_null(strstr(d.line, "tier=resident C=128/128"));
}

static void test_streaming_c_from_budget(void **st) {
    qw_tier_input in = model();
    in.ram_phys = 16 * GB;
    qw_tier_decision d;
    qw_tier_decide(&in, &d);
    assert_int_equal(d.tier, QW_TIER_STREAMING);
    const uint64_t budget = 16 * GB - 1 * GB - 400 * MB - qw_tier_headroom(16 * GB);
    assert_int_equal(d.budget, budget);
    assert_int_equal(d.c, (int32_t)(budget / (48 * in.slot_bytes)));
    assert_true(d.c > 8 && d.c < 128);
    /* the arena fits in the budget */
    assert_true((uint64_t)d.c * 48 * in.slot_bytes <= budget);
    assert_non_null(strstr(d.line, "tier=streaming"));
    assert_non_null(strstr(d.line, "RAM 16.0 GB"));
}

static void test_smallest_limit_wins(void **st) {
    qw_tier_input in = model();
    in.ram_phys = 64 * GB;
    in.ram_cgroup = 12 * GB;
    qw_tier_decision a, b, c;
    qw_tier_decide(&in, &a);
    assert_int_equal(a.ram, 12 * GB);
    assert_int_equal(a.tier, QW_TIER_STREAMING);
    in.ram_device = 8 * GB; /* QWISP_DEVICE_RAM below the cgroup */
    qw_tier_decide(&in, &b);
    assert_int_equal(b.ram, 8 * GB);
    assert_true(b.c < a.c);
    in.ram_device = 100 * GB; /* above: the cgroup still binds */
    qw_tier_decide(&in, &c);
    assert_int_equal(c.ram, 12 * GB);
    assert_int_equal(c.c, a.c);
}

static void test_device_ram_makes_big_machine_stream(void **st) {
    qw_tier_input in = model();
    in.ram_phys = 256 * GB;
    in.ram_device = 16 * GB;
    qw_tier_decision d;
    qw_tier_decide(&in, &d);
    assert_int_equal(d.tier, QW_TIER_STREAMING);
}

static void test_explicit_raw_c(void **st) {
    qw_tier_input in = model();
    in.ram_phys = 4 * GB; /* would stream */
    qw_tier_decision d;
    in.raw_c = 0;
    qw_tier_decide(&in, &d);
    assert_int_equal(d.tier, QW_TIER_RESIDENT);
    assert_non_null(strstr(d.line, "QWISP_RAW_C=0"));
    in.ram_phys = 512 * GB; /* would be resident */
    in.raw_c = 48;
    qw_tier_decide(&in, &d);
    assert_int_equal(d.tier, QW_TIER_STREAMING);
    assert_int_equal(d.c, 48);
    in.raw_c = 3; /* below top-k: clamped up */
    qw_tier_decide(&in, &d);
    assert_int_equal(d.c, 8);
    in.raw_c = 1000; /* above n_expert: clamped down */
    qw_tier_decide(&in, &d);
    assert_int_equal(d.c, 128);
}

static void test_minimum_is_top_k(void **st) {
    qw_tier_input in = model();
    in.ram_phys = 2 * GB; /* budget below even top-k slots */
    qw_tier_decision d;
    qw_tier_decide(&in, &d);
    assert_int_equal(d.tier, QW_TIER_STREAMING);
    assert_int_equal(d.c, 8);
    assert_non_null(strstr(d.line, "minimum"));
}

static void test_unknown_ram_is_resident(void **st) {
    qw_tier_input in = model();
    qw_tier_decision d;
    qw_tier_decide(&in, &d);
    assert_int_equal(d.tier, QW_TIER_RESIDENT);
}

static void test_parse_gb(void **st) {
    qw_error err = {0};
    uint64_t b = 0;
    assert_int_equal(qw_parse_gb("QWISP_DEVICE_RAM", "16", &b, &err), 0);
    assert_int_equal(b, 16 * GB);
    assert_int_equal(qw_parse_gb("QWISP_DEVICE_RAM", "0.25", &b, &err), 0);
    assert_int_equal(b, 250 * MB);
    assert_int_equal(qw_parse_gb("QWISP_DEVICE_RAM", "2gb", &b, &err), 0);
    assert_int_equal(b, 2 * GB);
    assert_int_equal(qw_parse_gb("QWISP_DEVICE_RAM", "lots", &b, &err), -1);
    assert_non_null(strstr(err.msg, "QWISP_DEVICE_RAM='lots'"));
    assert_int_equal(qw_parse_gb("QWISP_DEVICE_RAM", "-1", &b, &err), -1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_resident_when_it_fits),
        cmocka_unit_test(test_streaming_c_from_budget),
        cmocka_unit_test(test_smallest_limit_wins),
        cmocka_unit_test(test_device_ram_makes_big_machine_stream),
        cmocka_unit_test(test_explicit_raw_c),
        cmocka_unit_test(test_minimum_is_top_k),
        cmocka_unit_test(test_unknown_ram_is_resident),
        cmocka_unit_test(test_parse_gb),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
