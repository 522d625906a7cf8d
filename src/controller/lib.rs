//! Reconcilers for every gpucloud.io kind and their shared machinery.
