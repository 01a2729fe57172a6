/* Hand-over fence: the take-over hold and the delivery lease. See
 * handfence.h. */
#include "core/platform.h"

#include "cluster/handfence.h"

#include <string.h>

void tn_handfence_init(tn_handfence_t *f)
{
    memset(f, 0, sizeof(*f));
}

void tn_handfence_config(tn_handfence_cfg_t *cfg, unsigned election_ms, unsigned session_ms)
{
    cfg->lease_ms = 2 * (uint64_t)election_ms;
    cfg->wait_ms = cfg->lease_ms + TN_HANDFENCE_MARGIN_MS;
    cfg->fence_covers = (uint64_t)session_ms >= cfg->wait_ms;
}

bool tn_handfence_change(tn_handfence_t *f, const tn_handfence_cfg_t *cfg,
                         const tn_handfence_change_t *c, uint64_t now)
{
    if (c->leader != c->self) {
        tn_handfence_init(f); /* not leading: nothing to hold */
        return false;
    }
    /* Led here already (the same tenure or an earlier change's hold,
     * which goes on), led by nobody before (offline: nobody delivered),
     * or by a node whose session ended past its lease: nothing new. */
    if (c->old_leader == c->self || c->old_leader == 0 || c->epoch <= c->old_epoch ||
        (c->old_fenced && cfg->fence_covers))
        return tn_handfence_holds(f, now);
    f->node = c->old_leader;
    f->epoch = c->epoch;
    f->until = now + cfg->wait_ms;
    return true;
}

bool tn_handfence_fetched(tn_handfence_t *f, uint32_t node, uint32_t leader_epoch)
{
    if (f->node == 0 || node != f->node || leader_epoch < f->epoch)
        return false;
    tn_handfence_init(f);
    return true;
}

bool tn_handfence_holds(tn_handfence_t *f, uint64_t now)
{
    if (f->node == 0)
        return false;
    if (now >= f->until) {
        tn_handfence_init(f);
        return false;
    }
    return true;
}

uint64_t tn_handfence_lease_until(const tn_handfence_cfg_t *cfg, uint64_t confirmed_at)
{
    return confirmed_at == 0 ? 1 : confirmed_at + cfg->lease_ms;
}
