/*
 * scrub_micro: the secret scrubber's cost per stream event, for callgrind
 * (instructions are steady on a shared machine, wall time is not).
 *
 *   cc -std=c11 -D_GNU_SOURCE -O2 -Iproviders -I. $(pkg-config --cflags \
 *      jansson libevent libcurl) -o /tmp/scrub_micro bench/scrub_micro.c \
 *      providers/scrub.c common/common.c -pthread
 *   valgrind --tool=callgrind /tmp/scrub_micro MODE
 *   callgrind_annotate --inclusive=yes callgrind.out.* | grep pv_scrub_
 *
 * MODE 0: pv_scrub_has on a 262-byte OpenAI chunk (47-character sk-proj
 * key), 1: pv_scrub_event on it (one stream: its model and fingerprint
 * values end in digits, its delta in "s", so something is carried every
 * event), 2: pv_scrub_event on bench/profile.sh's stream chunk with its
 * "sk-x" key.  100000 calls each; divide the inclusive count by them.
 */
#include "providers.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CALLS 100000

int
main(int argc, char **argv)
{
    int mode = argc > 1 ? atoi(argv[1]) : 1;
    struct cfg_provider p = {
        .name = "p",
        .base_url = "https://api.openai.com/v1",
        .api_key = mode == 2 ? "sk-x"
                             : "sk-proj-ABCdef0123456789xyzXYZ0123456789abcdefgh",
    };
    const char *ev =
        mode == 2
            ? "{\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"created\":1,"
              "\"model\":\"gpt-4.1\",\"choices\":[{\"index\":0,\"delta\":{"
              "\"content\":\"Hi\"}}]}"
            : "{\"id\":\"chatcmpl-B9MHDbslfkBeAs8l4bebGdFOJ6PeG\",\"object\":"
              "\"chat.completion.chunk\",\"created\":1741570283,\"model\":"
              "\"gpt-4o-2024-08-06\",\"system_fingerprint\":\"fp_4d4c1b3d87\","
              "\"choices\":[{\"index\":0,\"delta\":{\"content\":\" sessions "
              "is\"},\"logprobs\":null,\"finish_reason\":null}]}";
    struct pv_scrub *s = pv_scrub_new(&p);
    if (!s)
        return 1;
    size_t n = strlen(ev);
    struct pv_scrub_carry cy;
    memset(&cy, 0, sizeof(cy));
    long hits = 0;
    for (int i = 0; i < CALLS; i++) {
        if (mode == 0) {
            hits += pv_scrub_has(s, ev, n);
        } else {
            char *m = NULL;
            hits += pv_scrub_event(s, &cy, ev, n, &m);
            free(m);
        }
    }
    printf("%zu-byte event, %d calls: %ld masks, %u carried\n", n, CALLS, hits,
           cy.n);
    pv_scrub_free(s);
    return 0;
}
