/* Client-facing answers for replication refusals. See replerr.h. */
#include "core/platform.h"

#include "cluster/replerr.h"

#include "core/err.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

const char *tn_replerr_text(int status)
{
    switch (status) {
    case TN_EFEWREPLICAS:
        /* The words of the issue and of Kafka's NOT_ENOUGH_REPLICAS:
         * clients and runbooks match on them. */
        return "not enough in-sync replicas";
    case TN_EFENCED:
        return "partition leader changed (stale leader epoch); retry";
    case TN_ENOTSERVING:
        return "partition leader not serving yet";
    case TN_ECREATING:
        /* Held past TN_ROUTER_CREATE_HOLD_MS (cluster/router.h). */
        return "topic is being created; retry";
    case TN_EPLACING:
        /* A partition recovered at start, held past the same bound while
         * this node does not know yet whose it is (cluster/hold.h). */
        return "this node is still catching up with the cluster's placement; retry";
    default:
        return NULL;
    }
}

bool tn_replerr_retryable(int status)
{
    return tn_replerr_text(status) != NULL;
}

#ifdef TN_TEST
int tn_replerr_test_refusal(const char *topic, size_t len, bool settle)
{
    const char *spec = getenv(settle ? "TERN_TEST_REFUSE_SETTLE" : "TERN_TEST_REFUSE");
    if (spec == NULL)
        return 0;
    while (*spec != '\0') {
        const char *eq = strchr(spec, '=');
        if (eq == NULL)
            return 0;
        const char *name = eq + 1;
        size_t nlen = strcspn(name, ",");
        size_t plen = (size_t)(eq - spec);
        if (plen <= len && memcmp(spec, topic, plen) == 0) {
            static const struct {
                const char *name;
                int err;
            } known[] = {{"FEWREPLICAS", TN_EFEWREPLICAS},
                         {"FENCED", TN_EFENCED},
                         {"NOTSERVING", TN_ENOTSERVING}};
            for (size_t i = 0; i < sizeof(known) / sizeof(known[0]); i++)
                if (strlen(known[i].name) == nlen && memcmp(known[i].name, name, nlen) == 0)
                    return known[i].err;
        }
        spec = name + nlen;
        if (*spec == ',')
            spec++;
    }
    return 0;
}
#endif
