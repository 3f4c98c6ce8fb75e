/*
 * driver_graph.c: the smallest part of CUDA graphs a test needs: a graph of
 * kernel nodes run in the order they were added (dependencies are
 * accepted, not followed), instantiated and launched on a stream. A launch
 * issues each node's kernel on the stream as cuLaunchKernel would, inside
 * the driver: an interposer sees the graph launch, never its kernels. A
 * node keeps copies of its parameters (by the function's layout), as
 * cuGraphAddKernelNode does. Handles are not validated (a bad one is
 * undefined behaviour, as on NVIDIA's driver).
 */
#include "driver_internal.h"
#include "sim_image.h"

#include <stdlib.h>
#include <string.h>

struct gnode {
    CUfunction f;
    unsigned grid[3], block[3], shmem;
    uint8_t *args; /* the parameter block, by the layout's offsets */
    size_t size;
};

struct CUgraph_st {
    struct gnode *nodes;
    size_t n;
};

struct CUgraphExec_st {
    struct CUgraph_st g; /* a copy: later changes to the graph do not reach it */
};

CUresult CUDAAPI cuGraphCreate(CUgraph *phGraph, unsigned int flags)
{
    ENTER();
    if (!phGraph || flags) return CUDA_ERROR_INVALID_VALUE;
    *phGraph = calloc(1, sizeof(**phGraph));
    return *phGraph ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

static void nodes_free(struct CUgraph_st *g)
{
    for (size_t i = 0; i < g->n; i++)
        free(g->nodes[i].args);
    free(g->nodes);
}

CUresult CUDAAPI cuGraphDestroy(CUgraph hGraph)
{
    ENTER();
    if (!hGraph) return CUDA_ERROR_INVALID_VALUE;
    nodes_free(hGraph);
    free(hGraph);
    return CUDA_SUCCESS;
}

/* Kernel nodes of a module's functions with kernelParams (not extra). */
CUresult CUDAAPI cuGraphAddKernelNode_v2(CUgraphNode *phGraphNode, CUgraph hGraph,
                                         const CUgraphNode *dependencies, size_t numDependencies,
                                         const CUDA_KERNEL_NODE_PARAMS *p)
{
    ENTER();
    (void)dependencies, (void)numDependencies;
    if (!phGraphNode || !hGraph || !p || !p->func) return CUDA_ERROR_INVALID_VALUE;
    const struct sim_kernel *k = sim_drv_function_layout(p->func);
    if (!k || p->extra || (k->nparams && !p->kernelParams)) return CUDA_ERROR_NOT_SUPPORTED;
    struct gnode n = {.f = p->func,
                      .grid = {p->gridDimX, p->gridDimY, p->gridDimZ},
                      .block = {p->blockDimX, p->blockDimY, p->blockDimZ},
                      .shmem = p->sharedMemBytes};
    for (unsigned i = 0; i < k->nparams; i++)
        if (k->params[i].offset + k->params[i].size > n.size)
            n.size = k->params[i].offset + k->params[i].size;
    if (n.size && !(n.args = calloc(1, n.size))) return CUDA_ERROR_OUT_OF_MEMORY;
    for (unsigned i = 0; i < k->nparams; i++)
        memcpy(n.args + k->params[i].offset, p->kernelParams[i], k->params[i].size);
    struct gnode *a = realloc(hGraph->nodes, (hGraph->n + 1) * sizeof(*a));
    if (!a) {
        free(n.args);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    hGraph->nodes = a;
    hGraph->nodes[hGraph->n++] = n;
    *phGraphNode = (CUgraphNode)(uintptr_t)hGraph->n; /* its position, never looked at */
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGraphInstantiateWithFlags(CUgraphExec *phGraphExec, CUgraph hGraph,
                                             unsigned long long flags)
{
    ENTER();
    (void)flags;
    if (!phGraphExec || !hGraph) return CUDA_ERROR_INVALID_VALUE;
    struct CUgraphExec_st *e = calloc(1, sizeof(*e));
    if (!e || (hGraph->n && !(e->g.nodes = calloc(hGraph->n, sizeof(*e->g.nodes))))) {
        free(e);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    for (size_t i = 0; i < hGraph->n; i++) {
        struct gnode n = hGraph->nodes[i];
        if (n.size && !(n.args = malloc(n.size))) {
            nodes_free(&e->g);
            free(e);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        if (n.size) memcpy(n.args, hGraph->nodes[i].args, n.size);
        e->g.nodes[e->g.n++] = n;
    }
    *phGraphExec = e;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGraphExecDestroy(CUgraphExec hGraphExec)
{
    ENTER();
    if (!hGraphExec) return CUDA_ERROR_INVALID_VALUE;
    nodes_free(&hGraphExec->g);
    free(hGraphExec);
    return CUDA_SUCCESS;
}

/* Each node's kernel, in order, on hStream (the driver's own launch path:
 * -Bsymbolic-functions binds this call inside the library). */
CUresult CUDAAPI cuGraphLaunch(CUgraphExec hGraphExec, CUstream hStream)
{
    ENTER();
    if (!hGraphExec) return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < hGraphExec->g.n; i++) {
        struct gnode *n = &hGraphExec->g.nodes[i];
        size_t size = n->size;
        void *extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, n->args, CU_LAUNCH_PARAM_BUFFER_SIZE,
                         &size, CU_LAUNCH_PARAM_END};
        CUresult r =
            cuLaunchKernel(n->f, n->grid[0], n->grid[1], n->grid[2], n->block[0], n->block[1],
                           n->block[2], n->shmem, hStream, NULL, n->size ? extra : NULL);
        if (r != CUDA_SUCCESS) return r;
    }
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGraphLaunch_ptsz(CUgraphExec hGraphExec, CUstream hStream)
{
    return cuGraphLaunch(hGraphExec, hStream);
}
