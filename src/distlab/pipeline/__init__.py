"""What the Snakemake workflow itself uses beside the papers' workflow modules (torch-free).

* :mod:`~distlab.pipeline.jobs`: what a batch job asks the scheduler for, from its run spec.
* :mod:`~distlab.pipeline.extra_seeds`: extra seeds for named claims, on request.
* :mod:`~distlab.pipeline.smkfix`: the version-checked hook on Snakemake's scheduler that the
  Snakefile installs when it is parsed.

(The fork server the jobs run under is :mod:`distlab.runtime.forkserver`.)
"""
