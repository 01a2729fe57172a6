/* The replica manager (replica.h). First cut: the interface other modules
 * build against; the partitions' cores are wired in next. */
#include "core/platform.h"

#include "cluster/replica.h"

#include "core/alloc.h"
#include "core/err.h"

#include <string.h>

struct tn_replica_s {
    tn_replica_opts_t o;
};

int tn_replica_new(const tn_replica_opts_t *o, tn_replica_t **out)
{
    if (!o || !o->loop || !o->meta || !o->broker)
        return UV_EINVAL;
    tn_replica_t *rm = tn_calloc(1, sizeof(*rm));
    if (!rm)
        return UV_ENOMEM;
    rm->o = *o;
    rm->o.data_dir = NULL;
    *out = rm;
    return 0;
}

void tn_replica_set_rpc(tn_replica_t *rm, tn_rpc_t *rpc)
{
    rm->o.rpc = rpc;
}

int tn_replica_start(tn_replica_t *rm)
{
    (void)rm;
    return 0;
}

void tn_replica_close(tn_replica_t *rm, void (*cb)(void *arg), void *arg)
{
    tn_free(rm);
    if (cb)
        cb(arg);
}

void tn_replica_on_fetch(tn_rpc_req_t *req, const uint8_t *payload, size_t len, void *arg)
{
    (void)payload, (void)len, (void)arg;
    tn_rpc_reply(req, 503, "application/json", "{\"error\":\"replication not wired\"}", 33);
}

bool tn_replica_local(tn_replica_t *rm, const char *topic, uint32_t p, bool *decided)
{
    (void)rm, (void)topic, (void)p;
    *decided = false;
    return false;
}

int tn_replica_accepts(tn_replica_t *rm, const char *topic, uint32_t p, uint32_t *leader_epoch)
{
    (void)rm, (void)topic, (void)p, (void)leader_epoch;
    return TN_EREMOTE;
}

bool tn_replica_serving(tn_replica_t *rm, const char *topic, uint32_t p)
{
    (void)rm, (void)topic, (void)p;
    return false;
}

bool tn_replica_replicated(tn_replica_t *rm, const char *topic, uint32_t p)
{
    (void)rm, (void)topic, (void)p;
    return false;
}

void tn_replica_stats(tn_replica_t *rm, tn_replica_stats_t *out)
{
    (void)rm;
    memset(out, 0, sizeof(*out));
}

int tn_replica_part_info(tn_replica_t *rm, const char *topic, uint32_t p, uint64_t *hw,
                         uint64_t *log_end)
{
    (void)rm, (void)topic, (void)p, (void)hw, (void)log_end;
    return TN_ENOTFOUND;
}
