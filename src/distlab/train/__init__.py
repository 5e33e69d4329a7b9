"""What every trainer shares (:mod:`distlab.train.common`: data types, seeding, flat buffers,
the image data and classifiers, the evaluation columns).  The baseline's trainer is
:mod:`distlab.baseline.train`, each paper's its package's ``train``."""
