"""A toy paper (the registry test's sixth paper): gradient descent on a noisy quadratic, one run
a seed, summarized into one table.  Copied into a scratch copy of the repository as
``src/distlab/toy`` with one registry line; it touches nothing else."""
