/* backend.c - the process's backend (mt_backend.h). */
#include "mt_backend.h"

#include <string.h>

const MtBackend *mt_backend_now = &mt_backend_cpu;

void mt_backend_set(const MtBackend *be) { mt_backend_now = be ? be : &mt_backend_cpu; }

const MtBackend *mt_backend_find(const char *name)
{
    static const MtBackend *const all[] = {&mt_backend_cpu};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (strcmp(all[i]->name, name) == 0)
            return all[i];
    return NULL;
}
