// The device state's registration under -rdc (no GPU needed): two translation units that include
// only the device library and a registration function of their own, which counts. Built with
// -rdc=true and linked with librshmem_device.a, the program's one state is registered once
// ("registered 1"); built without -rdc, once per unit ("registered 2").
#include "rshmem/rshmem.cuh"

#include <cstdio>

static int registered;
extern "C" int rshmem_device_register_state_updater(rshmem_state_updater_fn) {
    return ++registered;
}

__global__ void count_a(int *out) { out[0] = rshmem_my_pe(); }
void count_launch_b(int *out);

int main(int argc, char **) {
    printf("registered %d\n", registered);
    if (argc > 5) {  // never: the kernels are only linked
        count_a<<<1, 1>>>(nullptr);
        count_launch_b(nullptr);
    }
    return 0;
}
