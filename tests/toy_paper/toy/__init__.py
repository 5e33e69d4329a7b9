"""A toy paper (the registry test's seventh paper): gradient descent on a noisy quadratic, one run
a seed, summarized into one table.  Copied into a scratch copy of the repository as
``src/distlab/toy``, its package alone: it is found, and touches nothing else."""
