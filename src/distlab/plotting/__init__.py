"""Plotting: one style, one interval and one provenance rule for every figure of the project.

Each paper's ``figures.py`` (the atlas's and the baseline's, :mod:`distlab.baseline.figures`,
among them) draws from its summary tables only, through this package, so that
every figure of the project reads the same way:

* :mod:`~distlab.plotting.style` is the print size: a figure is a column (3.5 in) or a page
  (7 in) wide, saved at 300 dpi without scaling, no text under 8 points.
* :mod:`~distlab.plotting.names` maps internal ids to the papers' names
  (:func:`~distlab.plotting.names.display`; ``hsdag_corrected`` -> "HSDAG").
* :mod:`~distlab.plotting.captions` writes each figure's caption beside it
  (``<name>.caption.txt``, and in the PNG): what it shows, its seeds, its interval, its basis
  and the paper's figure number.  The write-up reads it with
  :func:`~distlab.plotting.captions.figure_caption` and orders figures as the papers do with
  :func:`~distlab.plotting.captions.figure_number` (both exported here).
* :mod:`~distlab.plotting.plots` is the seaborn style (Agg backend, PNG/PDF/SVG by
  suffix) and the drawing helpers: a line or a bar with the mean over seeds and a 95 %
  Student-t band (:func:`distlab.scoring.stats.t_interval`, the interval of the tables and the
  scorecard; deterministic, no resampling), curves that coincide named in a note instead of
  hidden under each other named in the caption, log ticks.  :func:`~distlab.plotting.plots.save`
  lays the figure out at its print width and applies the legibility rules where it can (a
  legend to where it covers no data, the suptitle above the axes' titles);
  :func:`~distlab.plotting.plots.legibility_problems` reports what is left;
  ``tests/test_figures_legible.py`` and ``tests/test_figure_print.py`` hold every figure of the
  tiny run to them.
* :mod:`~distlab.plotting.plotclock` says which clock a figure's times are on.  Every
  figure states whether its times are simulated (the virtual clock of the simulated
  cluster), measured (wall clock, with the backend) or extrapolated (from measurements):
  :func:`~distlab.plotting.plots.label_provenance` puts into the caption
  :func:`~distlab.plotting.plotclock.provenance_text`, and
  :func:`~distlab.plotting.plotclock.carry_clock` adds its clock to a title that names none.
* :mod:`~distlab.plotting.plottext` finds where a figure's texts sit (titles, axis labels,
  text boxes, legends) and which of them print over each other or over another axes' tick
  labels; :mod:`~distlab.plotting.plots` moves what it can and reports the rest.
* :mod:`~distlab.plotting.util` holds the small table helpers the figure modules share:
  :func:`~distlab.plotting.util.ci_cell` (a mean and its 95 % t interval as a table cell and
  as numbers) and :func:`~distlab.plotting.util.on_grid` (each run's curve interpolated onto a
  common grid over the span all runs of a group cover, so curves over a continuous x such as
  time can be averaged across seeds; nothing is extrapolated).

A figure module calls :func:`~distlab.plotting.plots.set_style` once, draws at
``plots.COLUMN`` or ``plots.PAGE`` with these helpers, labels its provenance, gives its
caption (:func:`~distlab.plotting.plots.caption`) and saves with :func:`~distlab.plotting.plots.save`
(atomically, through :mod:`distlab.results.tables`).  Below this package:
:mod:`distlab.scoring.stats` and :mod:`distlab.results.tables`.  Code outside this package
uses only the public names of its modules (no leading underscore).
"""

from .captions import figure_caption, figure_number  # noqa: E402,F401 (the write-up's interface)
