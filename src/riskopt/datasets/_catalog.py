"""What is known about each named dataset (for ``riskopt.datasets.info`` and ``riskopt datasets``).

Row / column counts are those verified in ``shared/data/*/PROVENANCE.md`` (raw files) and the
shapes the loaders return by default (``n_train``, ``n_test``, ``d``; checked by
``tests/test_datasets.py``). ``files`` are the data-folder files a default load reads;
``missing`` lists files the default preparation needs but that were never published.
"""

_UCI = "CC BY 4.0 (UCI)"

CATALOG = {
    # ---- bundled regression sets (riskopt.datasets.regression)
    "yacht": dict(task="regression", source="UCI Yacht Hydrodynamics (dataset 243)",
                  licence=_UCI, raw="308 x 7", n_train=244, n_test=62, d=6, groups=[],
                  files=["yacht/yacht_hydrodynamics.data"], bundled=True,
                  notes="protocol='paper' keeps the reference loader's header=1 quirk (306 rows); "
                        "'clean' keeps all 308 (246 / 62)"),
    "energy": dict(task="regression", source="UCI Energy Efficiency (dataset 242), target Y2",
                   licence=_UCI, raw="768 x 10", n_train=614, n_test=154, d=8, groups=[],
                   files=["energy/ENB2012_data.xlsx"], bundled=True),
    "concrete": dict(task="regression", source="UCI Concrete Compressive Strength (dataset 165)",
                     licence=_UCI, raw="1030 x 9", n_train=824, n_test=206, d=8, groups=[],
                     files=["concrete/Concrete_Data.xls"], bundled=True),
    "kin8nm": dict(task="regression", source="OpenML 189 (DELVE kin8nm)",
                   licence="not stated (OpenML lists it as public; unverified)", raw="8192 x 9",
                   n_train=6553, n_test=1639, d=8, groups=[],
                   files=["kin8nm/dataset_2175_kin8nm.csv"], bundled=True),
    "power": dict(task="regression", source="UCI Combined Cycle Power Plant (dataset 294), Sheet1",
                  licence=_UCI, raw="9568 x 5 (x 5 sheets)", n_train=7654, n_test=1914, d=4,
                  groups=[], files=["power/Folds5x2_pp.xlsx", "power/Readme.txt"], bundled=True),
    # ---- data-folder sets (riskopt.datasets.real)
    "diabetes": dict(
        task="binary", source="UCI Diabetes 130-US hospitals 1999-2008 (dataset 296); Prospect "
                              "/ fairlearn preparation", licence=_UCI, raw="101,766 x 50",
        n_train=4000, n_test=1000, d=33, groups=["gender", "race"],
        files=["diabetes/diabetic_data.csv.gz"],
        notes="n_samples=None uses all 101,766 rows (81,412 / 20,354)"),
    "acsincome": dict(
        task="regression", source="folktables ACSIncome (2018 ACS PUMS, all states), "
                                  "Prospect/DRAGO 5,000-row preparation",
        licence="not stated (ACS PUMS is public-use)", raw="X_test 1000 x 202; y 4000 + 1000",
        n_train=4000, n_test=1000, d=202, groups=["race", "sex"],
        files=["acsincome/X_train.npy", "acsincome/X_test.npy", "acsincome/y_train.npy",
               "acsincome/y_test.npy", "acsincome/metadata_tr.csv", "acsincome/metadata_te.csv"],
        missing=["acsincome/X_train.npy"],
        notes="X_train was never published; fallback='test_split' gives 800 / 200 rows of the "
              "published test split"),
    "amazon": dict(
        task="multiclass", source="WILDS Amazon Reviews, Prospect preparation (BERT features)",
        licence="not stated (WILDS / Amazon review terms)", raw="y, z: 10000 per split; no X",
        n_train=10000, n_test=10000, d=107, n_classes=5, groups=["label"],
        files=[f"amazon/{k}_{s}.npy" for k in ("X", "y", "z") for s in ("train", "val", "test")],
        missing=["amazon/X_train.npy", "amazon/X_val.npy", "amazon/X_test.npy"],
        notes="no features were published: labels and metadata only (amazon_labels()); d=107 is "
              "inferred from the paper's 535 = 107 x 5 parameters"),
    "iwildcam": dict(
        task="multiclass", source="WILDS iWildCam2020, Prospect preparation (ResNet50 + PCA)",
        licence="not stated (WILDS / iWildCam terms)",
        raw="X_validation, X_test 5000 x 157; y 20000 / 5000 / 5000",
        n_train=20000, n_test=5000, d=157, n_classes=60, groups=["label"],
        files=["iwildcam/X_train.npy", "iwildcam/X_validation.npy", "iwildcam/X_test.npy",
               "iwildcam/y_train.npy", "iwildcam/y_validation.npy", "iwildcam/y_test.npy"],
        missing=["iwildcam/X_train.npy"],
        notes="X_train was never published; fallback='validation' trains on the 5,000 "
              "validation images"),
    "law_school": dict(
        task="regression", source="LSAC National Longitudinal Bar Passage Study (Wightman 1998), "
                                  "cleaned by Le Quy et al. 2022",
        licence="not stated (LSAC / SEAPHE terms unknown; research use)", raw="20,798 x 12",
        n_train=16638, n_test=4160, d=10, groups=["race", "sex"],
        files=["law_school/law_school_clean.csv"],
        notes="target ugpa (SOREL: a student's GPA; target='zfygpa' the former default); "
              "target='pass_bar' for classification; "
              "variant='kusner' reads law_data.csv (21,791 x 8, ZFYA)"),
    "adult": dict(
        task="binary", source="UCI Adult (dataset 2), Kohavi & Becker 1996", licence=_UCI,
        raw="32,561 x 15 + 16,281 x 15", n_train=32561, n_test=16281, d=100,
        groups=["sex", "race", "education"],
        files=["adult/adult.data.gz", "adult/adult.test.gz"]),
    "compas": dict(
        task="binary", source="ProPublica COMPAS two-year recidivism (Angwin et al. 2016)",
        licence="none stated (ProPublica public release; contains personal data)",
        raw="7,214 x 53", n_train=4937, n_test=1235, d=12,
        groups=["race", "sex", "caucasian"], files=["compas/compas-scores-two-years.csv"],
        notes="ProPublica's standard filter keeps 6,172 rows (filtered=False: all 7,214)"),
    "mushrooms": dict(
        task="binary", source="LIBSVM 'mushrooms' (UCI Mushroom, dataset 73)", licence=_UCI,
        raw="8,124 x 112", n_train=6499, n_test=1625, d=112, groups=[],
        files=["mushrooms/mushrooms"], notes="test_size=0 keeps all 8,124 rows for training"),
    "a9a": dict(
        task="binary", source="LIBSVM 'a9a' (UCI Adult, Platt 1998)", licence=_UCI,
        raw="32,561 x 123 + 16,281 x 123", n_train=32561, n_test=16281, d=123, groups=[],
        files=["a9a/a9a", "a9a/a9a.t"]),
}

SYNTHETIC_INFO = {
    "splplus": dict(source="SPL+ (Meng & Gower) Sec. 6.1, Tables 1-2", d=10),
    "heavy_tailed_regression": dict(source="riskopt synthetic: heavy-tailed noise", d=10),
    "group_shift": dict(source="riskopt synthetic: group-shifted mixtures", d=10),
}
