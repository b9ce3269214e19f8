/*
 * registry.c: the provider kinds built into llmux, one line each.  A new
 * kind is one file (its pv_ops) plus one line here.
 */
#include "providers.h"
#include "providers_int.h"

#include <stddef.h>

static const struct {
    enum cfg_kind kind;
    const struct pv_ops *ops;
} kinds[] = {
    {CFG_KIND_OPENAI, &pv_openai_ops},
    {CFG_KIND_LOCAL, &pv_local_ops},
    {CFG_KIND_ANTHROPIC, &pv_anthropic_ops},
    {CFG_KIND_GEMINI, &pv_gemini_ops},
};

const struct pv_ops *
pv_ops_for(enum cfg_kind kind)
{
    for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++)
        if (kinds[i].kind == kind)
            return kinds[i].ops;
    return NULL;
}
