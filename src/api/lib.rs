//! Custom resource types of the gpucloud.io API group.
