"""Every ``from_paper`` entry of the built-in experiments, tied to the sentence of the paper that states it.

:data:`SUPPORT` is the table: for each experiment, its paper's text file, and for each entry of its
``from_paper`` list one or more rows ``(setting, value, quotes, shown)``. The tests check that

(a) the experiment, loaded through :func:`fedopt.sweep.config.load_experiment` and expanded into its
    runs, really has that value (over the runs of ``grid`` that match ``where``);
(b) every ``from_paper`` entry of every experiment has a row, and every row names an existing entry,
    so a new claim without a sentence behind it fails;
(c) each quoted sentence occurs in the paper's text (whitespace normalized), and the part ``shown``
    that states the value occurs in the quote.

The papers' text lies in ``shared/papers`` beside the repository; without it only the search of
(c) is skipped. The extracted text repeats inline mathematics, once rendered and once as TeX:
``n=30n=30`` reads n = 30, ``1010 independent trials`` reads 10, ``set to 44`` reads 4.

Settings are paths into a resolved run configuration (``"dataset.n_clients"``), ``"grid.ATTR"``
(an attribute of the run's grid: ``paper_slope``, ``slope``, ``metric``), ``"trials"`` (the
number of run seeds), or one of the derived quantities of :data:`DERIVED` and :data:`AGGREGATES`,
which translate fedopt's parameters into the paper's symbols. A value is compared with the set of
values the setting takes over the selected runs; a set of values must match exactly, or be
included when ``includes=True`` (the experiment adds values of its own, listed in its defaults).
"""

# The quotes copy the papers' text, Greek letters included.
# ruff: noqa: RUF001

from __future__ import annotations

import functools
import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest

from fedopt import algorithms
from fedopt.algorithms.decentralized.base import DecentralizedMethod
from fedopt.algorithms.vi.base import LocalVIMethod, VIMethod
from fedopt.sweep.config import builtin_experiments, load_experiment
from fedopt.sweep.execute import build

ROOT = Path(__file__).resolve().parents[2]
PAPERS = ROOT.parent / "shared" / "papers"


@dataclass
class Row:
    """One value of a ``from_paper`` entry: the configuration's ``setting`` equals ``value`` as ``quotes`` say."""

    setting: str
    value: object
    quotes: tuple[str, ...]
    shown: tuple[str, ...]  # the parts of the quotes that state the value
    grid: str | None = None  # only the runs of this grid
    where: dict = field(default_factory=dict)  # only the runs whose configuration has these values
    includes: bool = False  # the runs' values include ``value`` (a set) instead of equalling it
    note: str = ""


def row(setting, value, quotes, shown, **options) -> Row:
    quotes = (quotes,) if isinstance(quotes, str) else tuple(quotes)
    shown = (shown,) if isinstance(shown, str) else tuple(shown)
    return Row(setting, value, quotes, shown, **options)


# ----------------------------------------------------------------------------------------- FedNMap
FEDNMAP = "fednmap.txt"
N_ALL = ("All methods use full client participation, the same number of communication rounds, and identical model "
         "initialization.")
N_COMPARE = ("We compare FedNMap against the method in (Zhang et al., 2024a) (denoted Zhang) and FedCanon "
             "(Zhou et al., 2025).")
N_MODEL = "using a one-hidden-layer neural network with sigmoid activations"
N_PHI = r"φ(x)=ν1x1+ν2x22,\varphi(x)=\nu_{1}\|x\|_{1}+\nu_{2}\|x\|_{2}^{2},"
N_NU = r"with ν1=0.001\nu_{1}=0.001 and ν2=0.01\nu_{2}=0.01."
N_SORT = ("To simulate data heterogeneity, we sort training samples by class labels and partition them among "
          "clients without overlap.")
N_TRIALS = "All reported results are averaged over 1010 independent trials."
N_FIG2_PANELS = ("(a) n=20n=20, Q=10Q=10.", "(b) n=50n=50, Q=10Q=10.", "(c) n=100n=100, Q=10Q=10.",
                 "(d) n=20n=20, Q=20Q=20.", "(e) n=50n=50, Q=20Q=20.", "(f) n=100n=100, Q=20Q=20.")
N_FIG2_STEPS = (r"The stepsizes are set to ηa=1/Q\eta_{a}=1/Q for local updates and ηs=1\eta_{s}=1 for the outer "
                r"loop across all methods. The parameter γ\gamma in FedNMap is set to 44.")
N_METRIC = (r"Figure 2 reports the stationarity measure Fnatγ(xt)2\|\mathrm{F}^{\gamma}_{\mathrm{nat}}(x_{t})\|^{2} "
            "against the number of communication rounds")
N_FIG3 = (r"Figure 3: Empirical evaluation of the linear speedup of FedNMap with respect to the number of clients nn "
          r"for fixed Q=10Q=10. The stepsizes are set to ηa=0.1\eta_{a}=0.1 for local updates and ηs=1\eta_{s}=1 "
          r"for the outer loop across all nn. The parameter γ\gamma in FedNMap is set to 44.")
N_FIG3_SLOPE = (r"Figure 3b reports the final stationarity measure against logn\log n. The steeper empirical slope "
                r"(1.436-1.436) compared to the theoretical prediction (0.5)(-0.5)")
N_FIG4 = (r"Figure 4: Empirical evaluation of the linear speedup property of FedNMap with respect to the number of "
          r"local updates QQ with a fixed n=30n=30. The stepsizes are set to ηa=1/Q\eta_{a}=1/Q for local updates "
          r"and ηs=1\eta_{s}=1 for the outer loop across QQ. The parameter γ\gamma in FedNMap is set to 44.")
N_FIG4_SLOPE = (r"Figure 4b reports the final stationarity measure as a function of logQ\log Q. The steeper "
                r"empirical slope (1.181-1.181)")
N_EFFECTIVE = (r"The stepsize rule ηa=1/Q\eta_{a}=1/Q ensures that the effective stepsize "
               r"η^=ηaηsQ\hat{\eta}=\eta_{a}\eta_{s}Q remains unchanged for different values of QQ.")
N_FIG5 = (r"In Figure 5, we fix n=30n=30 and ηs=1\eta_{s}=1, vary QQ, and consider three local stepsize rules: "
          r"ηa=1/Q\eta_{a}=1/Q, ηa=1/Q\eta_{a}=1/\sqrt{Q}, and ηa=0.05\eta_{a}=0.05.")
N_FIG5_CAPTION = (r"Figure 5: Empirical evaluation of FedNMap under different choices of the local stepsize "
                  r"ηa\eta_{a}. We fix n=30n=30, ηs=1\eta_{s}=1, and γ=4\gamma=4.")
N_FIG5_PANELS = (r"(a) Stationarity with ηa=1/Q\eta_{a}=1/Q.", r"(b) Stationarity with ηa=1/Q\eta_{a}=1/\sqrt{Q}.",
                 r"(c) Stationarity with ηa=0.05\eta_{a}=0.05.")

ELASTIC_NET = [
    row("regularizer.name", "elasticnet", N_PHI, r"\nu_{1}\|x\|_{1}+\nu_{2}\|x\|_{2}^{2}"),
    row("nu1 (= l1)", 0.001, N_NU, r"\nu_{1}=0.001"),
    row("nu2 (= l2 / 2)", 0.01, (N_NU, N_PHI), (r"\nu_{2}=0.01", r"\nu_{2}\|x\|_{2}^{2}"),
        note="fedopt's elastic net is l1 ||x||_1 + (l2 / 2) ||x||^2, so nu2 = l2 / 2"),
]
SORTED = [row("dataset.partition", "sorted", N_SORT, "sort training samples by class labels")]
SIGMOID_MLP = [row("problem.name", "mlp", N_MODEL, "one-hidden-layer neural network with sigmoid activations",
                   note="fedopt's mlp: one hidden sigmoid layer (fedopt/problems/mlp.py)")]
TEN_TRIALS = [row("trials", 10, N_TRIALS, "averaged over 1010 independent trials")]

FEDNMAP_SUPPORT = {
    "fednmap_fig2": {
        "methods FedNMap, Zhang, FedCanon; full participation; the same rounds and the same initial model for "
        "every method": [
            row("algorithm.name", {"fednmap", "zhang", "fedcanon"}, N_COMPARE,
                ("FedNMap", "(denoted Zhang)", "FedCanon")),
            row("rounds", 500, N_ALL, "the same number of communication rounds",
                note="one value of rounds for every run: the same for every method"),
            row("methods share the data, the model and the seeds", True, N_ALL, "identical model initialization",
                note="the initial model is problem.init(seed): the same for every method with the same seeds"),
            row("full participation", True, N_ALL, "full client participation",
                note="none of the methods has a client-sampling hyperparameter"),
        ],
        "one-hidden-layer sigmoid network for multi-class classification": SIGMOID_MLP,
        "elastic net nu1 = 1e-3, nu2 = 1e-2 (l1 = nu1, l2 = 2 nu2 in fedopt's (l2/2)||x||^2 form)": ELASTIC_NET,
        "sorted partition: samples sorted by class label, split among the clients without overlap": SORTED,
        "n in {20, 50, 100}, Q in {10, 20}": [
            row("dataset.n_clients", {20, 50, 100}, N_FIG2_PANELS, ("n=20n=20", "n=50n=50", "n=100n=100")),
            row("algorithm.local_steps", {10, 20}, N_FIG2_PANELS, ("Q=10Q=10", "Q=20Q=20")),
        ],
        "eta_a = 1/Q and eta_s = 1 for all methods, gamma = 4 (FedNMap)": [
            row("eta_a * Q", 1.0, N_FIG2_STEPS, r"\eta_{a}=1/Q"),
            row("algorithm.lr_server", 1.0, N_FIG2_STEPS, (r"\eta_{s}=1", "across all methods")),
            row("algorithm.gamma", 4.0, N_FIG2_STEPS, "FedNMap is set to 44", where={"algorithm.name": "fednmap"},
                grid="fig2"),
        ],
        "10 trials; metric ||F_nat^gamma(x_t)||^2": [
            *TEN_TRIALS,
            row("grid.metric", "stationarity", N_METRIC, r"\|\mathrm{F}^{\gamma}_{\mathrm{nat}}(x_{t})\|^{2}",
                note="fedopt's stationarity column is ||F_nat^gamma(x_t)||^2 at metric_gamma"),
        ],
    },
    "fednmap_fig3": {
        "FedNMap, one-hidden-layer sigmoid network, elastic net nu1 = 1e-3, nu2 = 1e-2": [
            row("algorithm.name", "fednmap", N_FIG3, "linear speedup of FedNMap"), *SIGMOID_MLP, *ELASTIC_NET],
        "sorted partition (samples sorted by class label, split among the clients without overlap)": SORTED,
        "Q = 10, eta_a = 0.1, eta_s = 1, gamma = 4": [
            row("algorithm.local_steps", 10, N_FIG3, "fixed Q=10Q=10"),
            row("algorithm.lr_local", 0.1, N_FIG3, r"\eta_{a}=0.1"),
            row("algorithm.lr_server", 1.0, N_FIG3, r"\eta_{s}=1"),
            row("algorithm.gamma", 4.0, N_FIG3, "FedNMap is set to 44"),
        ],
        "10 trials; the slope of log final stationarity against log n (paper: -1.436)": [
            *TEN_TRIALS,
            row("grid.slope", "dataset.n_clients", N_FIG3_SLOPE, r"final stationarity measure against logn\log n"),
            row("grid.paper_slope", -1.436, N_FIG3_SLOPE, "(1.436-1.436)"),
        ],
    },
    "fednmap_fig4": {
        "FedNMap, one-hidden-layer sigmoid network, elastic net nu1 = 1e-3, nu2 = 1e-2": [
            row("algorithm.name", "fednmap", N_FIG4, "linear speedup property of FedNMap"), *SIGMOID_MLP, *ELASTIC_NET],
        "sorted partition, n = 30": [*SORTED, row("dataset.n_clients", 30, N_FIG4, "a fixed n=30n=30")],
        "eta_a = 1/Q (so eta_a * eta_s * Q = 1), eta_s = 1, gamma = 4": [
            row("eta_a * Q", 1.0, N_FIG4, r"\eta_{a}=1/Q"),
            row("effective step eta_a * eta_s * Q", 1.0, N_EFFECTIVE, r"\hat{\eta}=\eta_{a}\eta_{s}Q"),
            row("algorithm.lr_server", 1.0, N_FIG4, r"\eta_{s}=1"),
            row("algorithm.gamma", 4.0, N_FIG4, "FedNMap is set to 44"),
        ],
        "10 trials; the slope of log final stationarity against log Q (paper: -1.181)": [
            *TEN_TRIALS,
            row("grid.slope", "algorithm.local_steps", N_FIG4_SLOPE,
                "final stationarity measure as a function of logQ"),
            row("grid.paper_slope", -1.181, N_FIG4_SLOPE, "(1.181-1.181)"),
        ],
    },
    "fednmap_fig5": {
        "FedNMap, one-hidden-layer sigmoid network, elastic net nu1 = 1e-3, nu2 = 1e-2, sorted partition": [
            row("algorithm.name", "fednmap", N_FIG5_CAPTION, "evaluation of FedNMap"), *SIGMOID_MLP, *ELASTIC_NET,
            *SORTED],
        "n = 30, eta_s = 1, gamma = 4": [
            row("dataset.n_clients", 30, N_FIG5_CAPTION, "n=30n=30"),
            row("algorithm.lr_server", 1.0, N_FIG5_CAPTION, r"\eta_{s}=1", grid="step-rules"),
            row("algorithm.gamma", 4.0, N_FIG5_CAPTION, r"\gamma=4"),
        ],
        "panels: eta_a = 1/Q (5a), 1/sqrt(Q) (5b), 0.05 (5c)": [
            row("eta_a rule", {"1/Q", "1/sqrt(Q)", 0.05}, (N_FIG5, *N_FIG5_PANELS),
                (r"\eta_{a}=1/Q", r"\eta_{a}=1/\sqrt{Q}", r"\eta_{a}=0.05")),
        ],
        "10 trials": TEN_TRIALS,
    },
    "speedup_demo": {
        "sorted partition: training samples sorted by label, split among the clients without overlap": SORTED,
        "elastic net nu1 = 1e-3, nu2 = 1e-2 (l1 = nu1, l2 = 2 nu2 in fedopt's (l2/2)||x||^2 form)": ELASTIC_NET,
        "eta_s = 1 (lr_server), gamma = 4 (FedNMap and the stationarity measure)": [
            row("algorithm.lr_server", 1.0, (N_FIG3, N_FIG4), r"\eta_{s}=1"),
            row("algorithm.gamma", 4.0, (N_FIG3, N_FIG4), "FedNMap is set to 44"),
            row("metric_gamma", 4.0, (N_METRIC, N_FIG3), (r"\mathrm{F}^{\gamma}_{\mathrm{nat}}", "set to 44"),
                note="the measure F_nat^gamma carries FedNMap's gamma"),
        ],
        "Fig. 3: Q = 10, eta_a = 0.1; Fig. 4: eta_a = 1/Q": [
            row("algorithm.local_steps", 10, N_FIG3, "fixed Q=10Q=10", grid="speedup-n"),
            row("algorithm.lr_local", 0.1, N_FIG3, r"\eta_{a}=0.1", grid="speedup-n"),
            row("eta_a * Q", 1.0, N_FIG4, r"\eta_{a}=1/Q", grid="speedup-Q"),
        ],
        "metric: the final ||F_nat^gamma(x_T)||^2, averaged over the trials": [
            row("grid.metric", "stationarity", (N_FIG3_SLOPE, N_TRIALS),
                ("final stationarity measure", "averaged over")),
        ],
    },
}

# ---------------------------------------------------------------------------------------- FedCanon
FEDCANON = "fedcanon.txt"
C_FIG1 = ("To investigate this effect, we uniformly distribute the A9A dataset across 1010 clients to train a simple "
          "linear model for a binary classification task, with MCP used as the regularization term.")
C_FIG1_METHOD = (r"we plot the training loss and proximal gradient trajectories of FedCanon under various combinations "
                 r"of α\alpha and β\beta in Fig. 1.")
C_LOSS = r"\mathcal{L} represents the cross-entropy loss between"
C_FIG1_PANELS = (r"(a) and (b) use the same β=0.02\beta=0.02 while varying α\alpha; (c) and (d) use the same "
                 r"α=0.05\alpha=0.05 while varying β\beta.")
C_FIG2 = ("For a smooth objective problem (i.e., h=0h=0), we compare FedCanon with FedAvg, SCAFFOLD and SCAFFNEW. For "
          "all these algorithms, we set the same number of clients (n=10n=10), learning rate, local update steps "
          "(K=20K=20), and training epochs (T=200T=200).")
C_FIG2_PARTITIONS = ("under three different label distribution settings: i.i.d., weak heterogeneity "
                     "(Dir(0.1)Dir(0.1)), and strong heterogeneity (Dir(0.01)Dir(0.01)).")
C_FIG3 = ("Next, we compare FedCanon with several existing composite FL methods, including FedMiD, FedDA and ZA1, "
          "under different data distributions (i.i.d., Dir(1)Dir(1) and Dir(0.2)Dir(0.2)), using the same number of "
          "communication rounds (T=200T=200). The FMNIST dataset is partitioned across 10 clients to train a CNN model "
          "with the SCAD penalty.")
C_FIG3_K = ("Fig. 3 illustrates the test accuracy over training time for different algorithms with a fixed number of "
            "local updates (K=40K=40).")
C_TABLE5 = ("Further, TABLE V provides a more detailed comparison of the training time under the i.i.d. setting for "
            "varying local update steps (K=10,20,40,80K=10,20,40,80).")
C_ZA1 = "ZA1 [zhang2024composite]"

FEDCANON_SUPPORT = {
    "fedcanon_fig1_mcp": {
        "FedCanon, a linear model with cross-entropy, MCP regularizer": [
            row("algorithm.name", "fedcanon", C_FIG1_METHOD, "trajectories of FedCanon"),
            row("problem.name", "softmax", (C_FIG1, C_LOSS), ("a simple linear model", "cross-entropy loss"),
                note="fedopt's softmax: a linear model with the cross-entropy loss"),
            row("regularizer.name", "mcp", C_FIG1, "MCP used as the regularization term"),
        ],
        "10 clients, data spread uniformly (iid)": [
            row("dataset.n_clients", 10, C_FIG1, "across 1010 clients"),
            row("dataset.partition", "iid", C_FIG1, "uniformly distribute"),
        ],
        "panels (a, b): several alpha at beta = 0.02; panels (c, d): several beta at alpha = 0.05": [
            row("FedCanon beta (= lr_local)", 0.02, C_FIG1_PANELS, r"\beta=0.02", grid="alpha"),
            row("FedCanon alpha (= lr_server * lr_local * K)", {0.01, 0.02, 0.05, 0.1, 0.2}, C_FIG1_PANELS,
                r"while varying α\alpha", grid="alpha", note="the alpha values themselves are ours (defaults)"),
            row("FedCanon alpha (= lr_server * lr_local * K)", 0.05, C_FIG1_PANELS, r"\alpha=0.05", grid="beta"),
            row("FedCanon beta (= lr_local)", {0.005, 0.01, 0.02, 0.05}, C_FIG1_PANELS, r"while varying β\beta",
                grid="beta", note="the beta values themselves are ours (defaults)"),
        ],
    },
    "fedcanon_fig3_scad": {
        "FedCanon, FedMiD, ZA1 (Zhang et al. 2024); 10 clients; SCAD penalty; T = 200 rounds": [
            row("algorithm.name", {"fedcanon", "fedmid", "zhang"}, (C_FIG3, C_ZA1),
                ("FedCanon", "FedMiD", "ZA1", "zhang2024composite"), note="FedDA is left out (see the defaults)"),
            row("dataset.n_clients", 10, C_FIG3, "across 10 clients"),
            row("regularizer.name", "scad", C_FIG3, "the SCAD penalty"),
            row("rounds", 200, C_FIG3, "(T=200T=200)"),
        ],
        "Table V: iid, K in {10, 20, 40, 80}; Fig. 3: K = 40, partitions iid, Dir(1), Dir(0.2)": [
            row("partition", "iid", C_TABLE5, "under the i.i.d. setting", grid="table5"),
            row("algorithm.local_steps", {10, 20, 40, 80}, C_TABLE5, "K=10,20,40,80", grid="table5"),
            row("partition", {"iid", "Dir(1)", "Dir(0.2)"}, (C_FIG3, C_FIG3_K), ("i.i.d., Dir(1)", "Dir(0.2)"),
                where={"algorithm.local_steps": 40}),
            row("algorithm.local_steps", 40, C_FIG3_K, "(K=40K=40)", grid="fig3-dirichlet"),
        ],
    },
    "fedcanon_table5_nuclear": {
        "FedCanon, FedMiD, ZA1 (Zhang et al. 2024); 10 clients; T = 200 rounds": [
            row("algorithm.name", {"fedcanon", "fedmid", "zhang"}, (C_FIG3, C_ZA1),
                ("FedCanon", "FedMiD", "ZA1", "zhang2024composite")),
            row("dataset.n_clients", 10, C_FIG3, "across 10 clients"),
            row("rounds", 200, C_FIG3, "(T=200T=200)"),
        ],
        "Table V: iid, K in {10, 20, 40, 80}": [
            row("partition", "iid", C_TABLE5, "under the i.i.d. setting"),
            row("algorithm.local_steps", {10, 20, 40, 80}, C_TABLE5, "K=10,20,40,80"),
        ],
    },
    "fedcanon_heterogeneity": {
        "FedCanon, FedAvg, SCAFFOLD, Scaffnew; no regularizer (h = 0); n = 10 clients; K = 20; T = 200": [
            row("algorithm.name", {"fedcanon", "fedavg", "scaffold", "scaffnew"}, C_FIG2,
                ("FedCanon with FedAvg, SCAFFOLD and SCAFFNEW",)),
            row("regularizer.name", "zero", C_FIG2, "(i.e., h=0h=0)"),
            row("dataset.n_clients", 10, C_FIG2, "(n=10n=10)"),
            row("K (local steps; Scaffnew: 1 / comm_prob)", 20, C_FIG2, "(K=20K=20)", where={"rounds": 200},
                note="Scaffnew communicates with probability p = 1/K: K local steps on average; the local-work "
                     "grid (an ablation) has K = 5"),
            row("rounds", {200}, C_FIG2, "(T=200T=200)", includes=True,
                note="the local-work grid (an ablation, K = 5) runs T = 800: the same gradient steps"),
        ],
        "the same learning rate for every method": [
            row("algorithm.lr_local", 0.05, C_FIG2, "the same number of clients (n=10n=10), learning rate",
                note="the value 0.05 is ours (defaults); one value for every method"),
        ],
        "partitions iid, Dir(0.1) and Dir(0.01) (label skew)": [
            row("partition", {"iid", "Dir(0.1)", "Dir(0.01)"}, C_FIG2_PARTITIONS,
                ("i.i.d.", "(Dir(0.1)Dir(0.1))", "(Dir(0.01)Dir(0.01))")),
        ],
    },
}

# --------------------------------------------------------------------------------------- DEPOSITUM
DEPOSITUM = "depositum.txt"
D_FIG4 = ("For this experiment, we use the MNIST dataset as training data, evenly distributed across 20 clients (with "
          "samples of different labels independently and identically distributed), and select CNN for model training "
          "and MCP as the regularization term. Under the same parameter settings ($\\alpha = 0.05$, $\\beta = 0.5$, "
          "$T_0 = 10$), Fig. 4 compares the training loss and test accuracy for DE-")
D_FIG4_GAMMA = ("POSITUM OPTION I/II with different momentum parameter settings ($\\gamma = \\{0.2, 0.5, 0.8\\}$), as "
                "well as the algorithm without momentum ($\\gamma = 0$).")
D_POLYAK = "if Polysk's momentum is chosen, then $\\nu_i^{t+1} = \\gamma \\nu_i^t + (1-\\gamma) y_i^t.$ end if OPTION I"
D_NESTEROV = ("if Nesterov's momentum is chosen, then $\\mu_i^{t+1} = \\gamma \\mu_i^t + (1 - \\gamma) y_i^t,$ "
              "$\\nu_i^{t+1} = \\gamma \\mu_i^{t+1} + (1 - \\gamma) y_i^t.$ end if OPTION II")
D_XBAR = ("It is noteworthy that the test accuracy in this and subsequent experiments is based on the aggregated "
          "average of the local models.")
D_FIG5 = ("Setting $\\gamma = 0.5$, this experiment uses the same step size parameters, training data, neural network, "
          "and regularization term as the previous one; however, in this case, the training data is non-IID across a "
          "ring network consisting of 20 clients (distributed according to Dir(1)).")
D_FIG5_T = ("The total number of iterations is set to T = 500, and the effect of communication period T_0 on the "
            "performance of DEPOSITUM is shown in Fig. 5(a) and (b).")
D_FIG6 = ("With $T_0 = 20$, while keeping the degree of heterogeneity in the local training data and all other "
          "settings consistent with the previous experiment, Fig. 6 presents the variations in train loss and test "
          "accuracy under these communication topologies.")
D_GRAPHS = ("The experiments in this section use three communication network topologies, as illustrated in Fig. 1: the "
            "complete graph, the ring graph, and the star graph.")
D_FIG7_MCP = ("In this experiment, we continue to use CNN as the training model, with the MNIST dataset serving as the "
              "training data and MCP as the regularization term.")
D_FIG7 = ("We set $T_0 = 10$, T = 400, $n = \\{4, 9, 16, 25\\}$, and configure suitable step size parameters α and β , "
          "momentum parameter γ , and batch size *B* based on Corollary 1. The clients are connected through a ring "
          "communication network, with labeled samples distributed among them according to Dir(1).")
D_COROLLARY = ("By setting $\\alpha = \\frac{\\sqrt{n}}{24L\\sqrt{T+1}}$, "
               "$1 - \\gamma = \\frac{\\sqrt{n}}{\\sqrt{T+1}}$, $B = \\sqrt{n}$")
D_TABLE3 = ("In this experiment, we select 10 clients to participate in training. For DEPOSITUM, the clients are "
            "connected through a complete communication topology, whereas for these FL algorithms used for "
            "comparison, a star topology with a central server is employed. The regularization term for all methods "
            "is set to SCAD.")
D_TABLE3_METHODS = ("This subsection provides a detailed performance comparison between DEPOSITUM and several existing "
                    "methods (FedMiD [8], FedDR [50], and FedADMM [51])")
D_TABLE3_PARTITIONS = "and data partitions (IID, Dir(1) and Dir(0.1), illustrated in Fig. 2)"
D_TABLE3_LR = "With consistent learning rates and training epochs"

ALPHA_BETA_FIG4 = [
    row("algorithm.lr", 0.05, D_FIG4, "$\\alpha = 0.05$", note="fedopt's DEPOSITUM: lr = alpha"),
    row("algorithm.tracking_rate", 0.5, D_FIG4, "$\\beta = 0.5$", note="tracking_rate = beta"),
]
FIG5_SETTINGS = [
    *[row(r.setting, r.value, (D_FIG4, D_FIG5), (*r.shown, "the same step size parameters"), note=r.note)
      for r in ALPHA_BETA_FIG4],
    row("algorithm.momentum", 0.5, D_FIG5, "Setting $\\gamma = 0.5$", note="momentum = gamma"),
]

DEPOSITUM_SUPPORT = {
    "depositum_momentum": {
        "DEPOSITUM, alpha = 0.05, beta = 0.5, T0 = 10, 20 nodes, IID partition, MCP (Fig. 4)": [
            row("algorithm.name", "depositum", (D_FIG4, D_FIG4_GAMMA), ("for DE-", "POSITUM OPTION I/II")),
            *ALPHA_BETA_FIG4,
            row("algorithm.comm_period", 10, D_FIG4, "$T_0 = 10$"),
            row("dataset.n_clients", 20, D_FIG4, "across 20 clients"),
            row("dataset.partition", "iid", D_FIG4, "independently and identically distributed"),
            row("regularizer.name", "mcp", D_FIG4, "MCP as the regularization term"),
        ],
        "gamma in {0, 0.2, 0.5, 0.8}, OPTION I (Polyak) and OPTION II (Nesterov)": [
            row("algorithm.momentum", {0.0, 0.2, 0.5, 0.8}, D_FIG4_GAMMA,
                ("$\\gamma = \\{0.2, 0.5, 0.8\\}$", "$\\gamma = 0$"), grid="momentum"),
            row("algorithm.momentum_type", {"polyak", "nesterov"}, (D_FIG4_GAMMA, D_POLYAK, D_NESTEROV),
                ("OPTION I/II", "Polysk's momentum", "OPTION I", "Nesterov's momentum", "OPTION II"), grid="momentum",
                note="'Polysk' is the paper's misprint of Polyak"),
        ],
    },
    "depositum_comm_period": {
        "DEPOSITUM, alpha = 0.05, beta = 0.5, gamma = 0.5 (Fig. 5)": [
            row("algorithm.name", "depositum", D_FIG5, "this experiment uses the same"), *FIG5_SETTINGS],
        "ring of 20 nodes, Dir(1) label partition, MCP regularizer": [
            row("algorithm.topology", "ring", D_FIG5, "ring network consisting of 20 clients"),
            row("dataset.n_clients", 20, D_FIG5, "20 clients"),
            row("partition", "Dir(1)", D_FIG5, "Dir(1)"),
            row("regularizer.name", "mcp", (D_FIG4, D_FIG5), ("MCP as the regularization term",
                                                                "and regularization term as the previous one")),
        ],
        "T = 500 iterations for every T0 (the equal-iterations grid)": [
            row("iterations (rounds * T0)", 500, D_FIG5_T, "T = 500", grid="equal-iterations"),
        ],
    },
    "depositum_topology": {
        "DEPOSITUM, alpha = 0.05, beta = 0.5, gamma = 0.5, T0 = 20 (Fig. 6)": [
            *[row(r.setting, r.value, (*r.quotes, D_FIG6), (*r.shown, "all other settings consistent"), note=r.note)
              for r in FIG5_SETTINGS],
            row("algorithm.comm_period", 20, D_FIG6, "$T_0 = 20$"),
        ],
        "MCP regularizer; Dir(1) label partition; ring, star and complete graphs": [
            row("regularizer.name", "mcp", (D_FIG4, D_FIG5, D_FIG6), ("MCP as the regularization term",
                                                                        "all other settings consistent")),
            row("partition", "Dir(1)", (D_FIG5, D_FIG6), ("Dir(1)", "the degree of heterogeneity")),
            row("algorithm.topology", {"ring", "star", "complete"}, D_GRAPHS, ("complete graph", "ring graph",
                                                                             "star graph"),
                grid="graphs", includes=True, note="the torus and the exponential graph are ours (defaults)"),
        ],
        "the model is evaluated at the network average xbar": [
            row("evaluated model", "network average", D_XBAR, "aggregated average of the local models",
                note="a DecentralizedMethod reports state.x = the average of the node models"),
        ],
    },
    "depositum_speedup": {
        "ring, n in {4, 9, 16, 25}, Dir(1) partition, MCP regularizer, T0 = 10 (Fig. 7)": [
            row("algorithm.topology", "ring", D_FIG7, "ring communication network"),
            row("dataset.n_clients", {4, 9, 16, 25}, D_FIG7, "$n = \\{4, 9, 16, 25\\}$"),
            row("partition", "Dir(1)", D_FIG7, "according to Dir(1)"),
            row("regularizer.name", "mcp", D_FIG7_MCP, "MCP as the regularization term"),
            row("algorithm.comm_period", 10, D_FIG7, "$T_0 = 10$"),
        ],
        "Corollary 1: alpha = c sqrt(n / (T + 1)), 1 - gamma = sqrt(n / (T + 1)), B = sqrt(n)": [
            row("alpha / sqrt(n / (T + 1)), T + 1 = rounds * T0 + 1", 0.5, D_COROLLARY,
                "\\alpha = \\frac{\\sqrt{n}}{24L\\sqrt{T+1}}",
                note="one constant c for every n: the paper's c = 1/(24 L); c = 0.5 is ours (defaults)"),
            row("(1 - gamma) / sqrt(n / (T + 1)), T + 1 = rounds * T0 + 1", 1.0, D_COROLLARY,
                "1 - \\gamma = \\frac{\\sqrt{n}}{\\sqrt{T+1}}"),
            row("B / sqrt(n)", 1.0, D_COROLLARY, "B = \\sqrt{n}"),
        ],
    },
    "depositum_baselines": {
        "10 clients; DEPOSITUM on the complete graph, the server methods on a star (Table III)": [
            row("dataset.n_clients", 10, D_TABLE3, "we select 10 clients"),
            row("algorithm.name", {"depositum", "fedmid", "feddr", "fedadmm"}, (D_TABLE3_METHODS,),
                ("DEPOSITUM", "FedMiD", "FedDR", "FedADMM"), grid="table3"),
            row("network", {"complete", "star (server)"}, D_TABLE3,
                ("connected through a complete communication topology", "a star topology with a central server"),
                grid="table3", note="FedMiD, FedDR and FedADMM are server-client methods (not decentralized)"),
            row("network", "complete", D_TABLE3, "a complete communication topology", grid="table3",
                where={"algorithm.name": "depositum"}),
        ],
        "SCAD regularizer for every method; 'consistent learning rates and training epochs'": [
            row("regularizer.name", "scad", D_TABLE3, "for all methods is set to SCAD"),
            row("step (DEPOSITUM lr, the others lr_local)", 0.05, D_TABLE3_LR, "consistent learning rates",
                grid="table3", note="the value 0.05 is ours (defaults); one value for every method"),
            row("rounds", 50, D_TABLE3_LR, "training epochs", grid="table3",
                note="the value 50 is ours (defaults); one value for every method"),
        ],
        "partitions Dir(1) and Dir(0.1) (Table III)": [
            row("partition", {"Dir(1)", "Dir(0.1)"}, D_TABLE3_PARTITIONS, ("Dir(1)", "Dir(0.1)")),
        ],
    },
}

# ------------------------------------------------------------------------------------------ LIPPAX
LIPPAX = "federated-vi-lippax.txt"
V_SYNC = "The clients synchronize with each other every K steps."
V_OUTPUT = (r"Let $\mathbf{x}_o = \frac{1}{MT} \sum_{m=1}^M \sum_{t=1}^T \mathbf{x}_t^m$ be the output of the "
            r"algorithm in (4).")
V_SYNC_X = (r"\frac{1}{M} \sum_{m=1}^M \left(\mathbf{z}_{t-1}^m - \eta \tilde{V}(\mathbf{z}_{t-1}^m) \right), "
            r"& \text{mod}(t, K) = 0. \end{cases} \\ \mathbf{z}_t^m")
V_SYNC_Z = (r"\frac{1}{M} \sum_{m=1}^M \left(\mathbf{z}_{t-1}^m - \eta \tilde{V}(\mathbf{x}_t^m) \right), "
            r"& \text{mod}(t, K) = 0. \end{cases} \end{aligned} \quad (4)")
V_THM1 = r"$$\eta = \min \left\{ \frac{1}{\sqrt{14KL}}, \frac{D\sqrt{M}}{\sigma\sqrt{6KR}},"
V_THM2 = (r"Then consider the algorithm given in (4) with $\eta = \min\left\{\frac{1}{L}, "
          r"\frac{D\sqrt{M}}{\sigma\sqrt{6KR}},")
V_THM3 = r"$$\eta = \min \left\{ \frac{1}{L}, \frac{D\sqrt{M}}{\sigma\sqrt{KR}},"
V_THM3_GAMMA = r"and let $\gamma = \frac{1}{\eta(L + \frac{1}{\eta})^2}$."
V_THM4 = (r"\frac{D^{\frac{1}{3}}}{\Lambda^{\frac{1}{3}} \sigma^{\frac{2}{3}} R^{\frac{1}{6}} K^{\frac{1}{6}}}, "
          r"\frac{D\sqrt{M}}{K^{\frac{1}{2}} R^{\frac{1}{2}} \sigma} \right\},")
V_NOISE = (r"Moreover, we assume the variance is upper bounded: "
           r"$$\mathbb{E}_{\xi} \|V(\mathbf{z}) - \tilde{V}(\mathbf{z}, \xi)\|^2 \leq \sigma^2.$$")
V_SIGMA_REGIMES = (r"While Theorem 1 indicates that LESGD is optimal when $\sigma = \Omega(\frac{1}{R^{\frac{1}{2}} "
                   r"K^{\frac{1}{4}}})$, and Corollary 2 implies that LIPPAX (Algorithm 1) is optimal when "
                   r"$\sigma = O(\frac{1}{\sqrt{RK}})$")
V_THM3_SIGMA = r"\frac{LD^2}{KR} + \frac{4\sigma D}{\sqrt{KR}}"
V_THM1_SIGMA = r"\frac{12LD^2}{\sqrt{KR}} + \frac{6D\sigma}{\sqrt{MKR}}"
V_HETERO = r"we consider the heterogeneous case, where $V(\mathbf{x}) = \frac{1}{M} \sum_{m=1}^M V_m(\mathbf{x})$."
V_ASSUMPTION2 = r"$$\|V_m(\mathbf{x}) - V(\mathbf{x})\| \leq \xi.$$"

LIPPAX_GAMMA = [
    row("LIPPAX inner step / (eta / (1 + eta L)^2)", 1.0, V_THM3_GAMMA,
        r"\gamma = \frac{1}{\eta(L + \frac{1}{\eta})^2}", where={"algorithm.name": "lippax"},
        note="1 / (eta (L + 1/eta)^2) = eta / (1 + eta L)^2"),
]

LIPPAX_SUPPORT = {
    "lippax_k": {
        "LESGD step cap eta = 1/(sqrt(14 K) L) (Theorem 1, with the spec's erratum: the paper prints 1/sqrt(14 K L))": [
            row("lr_local * sqrt(14 K) * L", 1.0, V_THM1, r"\frac{1}{\sqrt{14KL}}", grid="theory-step-lesgd",
                note="the printed 1/sqrt(14 K L) read as 1/(sqrt(14 K) L) (specs/lippax.md 2.1); L of the problem"),
        ],
        "LIPPAX eta = 1/L and gamma = eta / (1 + eta L)^2 (Theorem 3)": [
            row("lr_local * L", 1.0, V_THM3, r"\frac{1}{L}", grid="theory-step-lippax"),
            *LIPPAX_GAMMA,
        ],
        "synchronisation every K local steps; the output is the ergodic average over all steps and clients": [
            row("synchronisation", "every K local steps", V_SYNC, "every K steps"),
            row("evaluated model", "ergodic average", V_OUTPUT,
                r"\mathbf{x}_o = \frac{1}{MT} \sum_{m=1}^M \sum_{t=1}^T \mathbf{x}_t^m",
                note="a VIMethod reports state.x = the average of x_t^m over steps and clients"),
        ],
    },
    "lippax_m": {
        "eta = min(1/L, D sqrt(M)/(sigma sqrt(K R))) (Theorems 2 and 4, constants dropped)": [
            row("lr_local / min(1/L, D sqrt(M) / (sigma sqrt(K R)))", 1.0, (V_THM2, V_THM4),
                (r"\frac{1}{L}", r"\frac{D\sqrt{M}}{\sigma\sqrt{6KR}}",
                 r"\frac{D\sqrt{M}}{K^{\frac{1}{2}} R^{\frac{1}{2}} \sigma}"),
                note="L, D (the radius) and sigma of the problem, K and R of the run"),
        ],
        "LIPPAX gamma = eta / (1 + eta L)^2": LIPPAX_GAMMA,
        "oracle noise with total variance sigma^2": [
            row("E ||oracle noise||^2 / sigma^2", 1.0, V_NOISE, r"\leq \sigma^2"),
        ],
    },
    "lippax_sigma": {
        "the sigma terms of Theorems 1-3; Corollary 1 (LESGD optimal for large sigma) and Corollary 2 (LIPPAX for "
        "small sigma)": [
            row("algorithm.name", {"local-extra-sgd", "lippax"}, V_SIGMA_REGIMES, ("LESGD", "LIPPAX")),
            row("grid.predicted_slope", 1.0, (V_THM1_SIGMA, V_THM3_SIGMA),
                (r"\frac{6D\sigma}{\sqrt{MKR}}", r"\frac{4\sigma D}{\sqrt{KR}}"),
                note="both leading terms are linear in sigma"),
        ],
        "LIPPAX gamma = eta / (1 + eta L)^2": LIPPAX_GAMMA,
    },
    "lippax_heterogeneity": {
        "heterogeneity V_m = V + e_m with ||e_m|| <= zeta (Assumption 2) and avg_m e_m = 0": [
            row("max_m ||e_m|| / zeta", 1.0, V_ASSUMPTION2, r"\leq \xi", note="the paper's xi is our zeta"),
            row("||avg_m e_m||", 0.0, V_HETERO, r"V(\mathbf{x}) = \frac{1}{M} \sum_{m=1}^M V_m(\mathbf{x})"),
        ],
        "synchronisation of both x and z every K steps (eq. (4))": [
            row("algorithm.average_extrapolation", True, (V_SYNC_X, V_SYNC_Z),
                (r"\mathbf{z}_{t-1}^m - \eta \tilde{V}(\mathbf{z}_{t-1}^m)", r"\text{mod}(t, K) = 0",
                 r"\mathbf{z}_{t-1}^m - \eta \tilde{V}(\mathbf{x}_t^m)")),
        ],
    },
}

#: ``{experiment: (paper file, {from_paper entry: [Row, ...]})}``.
SUPPORT: dict[str, tuple[str, dict[str, list[Row]]]] = {
    **{name: (FEDNMAP, claims) for name, claims in FEDNMAP_SUPPORT.items()},
    **{name: (FEDCANON, claims) for name, claims in FEDCANON_SUPPORT.items()},
    **{name: (DEPOSITUM, claims) for name, claims in DEPOSITUM_SUPPORT.items()},
    **{name: (LIPPAX, claims) for name, claims in LIPPAX_SUPPORT.items()},
}


# ---------------------------------------------------------------------------------- derived values
def _path(config: dict, path: str):
    value = config
    for part in path.split("."):
        value = value[part]
    return value


def _partition(config):
    dataset = config["dataset"]
    return f"Dir({dataset['alpha']:g})" if dataset["partition"] == "dirichlet" else dataset["partition"]


def _local_steps(config):
    algorithm = config["algorithm"]
    return algorithm["local_steps"] if "local_steps" in algorithm else 1 / algorithm["comm_prob"]


def _network(config):
    return config["algorithm"]["topology"] if _is_decentralized(config) else "star (server)"


def _is_decentralized(config):
    return issubclass(algorithms.ALGORITHMS[config["algorithm"]["name"]], DecentralizedMethod)


def _evaluated_model(config):
    cls = algorithms.ALGORITHMS[config["algorithm"]["name"]]
    if issubclass(cls, DecentralizedMethod):
        return "network average"
    return "ergodic average" if issubclass(cls, VIMethod) else "server model"


#: Digits of the ratios whose constants the experiments round ("L about 1.2", "D about 4.0").
ABOUT = 1


def _problem(config):
    return build({**config, "backend": "numpy"})[0]


def _ratio(value, reference, digits=2):
    return round(value / reference, digits)


def _lesgd_cap(config):
    K = config["algorithm"]["local_steps"]
    return _ratio(config["algorithm"]["lr_local"] * math.sqrt(14 * K) * _problem(config).lipschitz, 1.0, ABOUT)


def _theorem_2_step(config):
    problem, K = _problem(config), config["algorithm"]["local_steps"]
    eta = min(1 / problem.lipschitz,
              problem.radius * math.sqrt(problem.n_clients) / (problem.sigma * math.sqrt(K * config["rounds"])))
    return _ratio(config["algorithm"]["lr_local"], eta, ABOUT)


def _lippax_inner_step(config):
    problem, algorithm = _problem(config), algorithms.make(**config["algorithm"])
    eta = algorithm.lr_local
    return _ratio(algorithm.inner_step(problem), eta / (1 + eta * problem.lipschitz) ** 2)


def _noise_variance(config):
    problem = _problem(config)
    noise = np.asarray(problem.sample_noise(np.random.default_rng(0), 500))
    return round(float((noise ** 2).sum(axis=-1).mean()) / problem.sigma ** 2, 1)


def _shift_norms(config):
    problem = _problem(config)
    return _ratio(float(np.linalg.norm(problem.shifts, axis=1).max()), problem.heterogeneity)


def _shift_mean(config):
    return round(float(np.linalg.norm(_problem(config).shifts.mean(axis=0))), 12)


def _corollary_1(config, value):
    n, a = config["dataset"]["n_clients"], config["algorithm"]
    return round(value / math.sqrt(n / (config["rounds"] * a["comm_period"] + 1)), 2)


#: Per-run values in the paper's symbols: ``name -> f(config, labels)``.
DERIVED = {
    "iterations (rounds * T0)": lambda c, _: c["rounds"] * c["algorithm"]["comm_period"],
    "nu1 (= l1)": lambda c, _: c["regularizer"]["l1"],
    "nu2 (= l2 / 2)": lambda c, _: c["regularizer"]["l2"] / 2,
    "eta_a * Q": lambda c, _: c["algorithm"]["lr_local"] * c["algorithm"]["local_steps"],
    "effective step eta_a * eta_s * Q": lambda c, _: (c["algorithm"]["lr_local"] * c["algorithm"]["lr_server"]
                                                      * c["algorithm"]["local_steps"]),
    "eta_a rule": lambda _, labels: labels["algorithm.lr_local"],
    "full participation": lambda c, _: not any("particip" in key or "client" in key for key in c["algorithm"]),
    "FedCanon beta (= lr_local)": lambda c, _: c["algorithm"]["lr_local"],
    "FedCanon alpha (= lr_server * lr_local * K)": lambda c, _: (c["algorithm"]["lr_server"]
                                                                 * c["algorithm"]["lr_local"]
                                                                 * c["algorithm"]["local_steps"]),
    "partition": lambda c, _: _partition(c),
    "K (local steps; Scaffnew: 1 / comm_prob)": lambda c, _: _local_steps(c),
    "network": lambda c, _: _network(c),
    "step (DEPOSITUM lr, the others lr_local)": lambda c, _: c["algorithm"]["lr" if _is_decentralized(c)
                                                                            else "lr_local"],
    "evaluated model": lambda c, _: _evaluated_model(c),
    "alpha / sqrt(n / (T + 1)), T + 1 = rounds * T0 + 1": lambda c, _: _corollary_1(c, c["algorithm"]["lr"]),
    "(1 - gamma) / sqrt(n / (T + 1)), T + 1 = rounds * T0 + 1": lambda c, _: _corollary_1(c,
                                                                                       1 - c["algorithm"]["momentum"]),
    "B / sqrt(n)": lambda c, _: round(c["algorithm"]["batch_size"] / math.sqrt(c["dataset"]["n_clients"]), 2),
    "synchronisation": lambda c, _: ("every K local steps" if issubclass(algorithms.ALGORITHMS[c["algorithm"]["name"]],
                                                                         LocalVIMethod) else "other"),
    "lr_local * sqrt(14 K) * L": lambda c, _: _lesgd_cap(c),
    "lr_local * L": lambda c, _: _ratio(c["algorithm"]["lr_local"] * _problem(c).lipschitz, 1.0, ABOUT),
    "lr_local / min(1/L, D sqrt(M) / (sigma sqrt(K R)))": lambda c, _: _theorem_2_step(c),
    "LIPPAX inner step / (eta / (1 + eta L)^2)": lambda c, _: _lippax_inner_step(c),
    "E ||oracle noise||^2 / sigma^2": lambda c, _: _noise_variance(c),
    "max_m ||e_m|| / zeta": lambda c, _: _shift_norms(c),
    "||avg_m e_m||": lambda c, _: _shift_mean(c),
}


def _share_data_model_and_seeds(runs):
    """Every method runs on the same data sets, models and seeds (so from the same initial models)."""
    by_method = {}
    for spec in runs:
        key = (json.dumps([spec.config["dataset"], spec.config["problem"]], sort_keys=True), spec.config["seed"])
        by_method.setdefault(spec.config["algorithm"]["name"], set()).add(key)
    return len(by_method) > 1 and len({frozenset(keys) for keys in by_method.values()}) == 1


#: Values of a whole selection of runs: ``name -> f(runs)``.
AGGREGATES = {"methods share the data, the model and the seeds": _share_data_model_and_seeds}


def _canonical(value):
    if isinstance(value, float):
        return float(f"{value:.9g}")
    return value


def _values(item: Row, exp, runs) -> set:
    if item.setting in AGGREGATES:
        return {AGGREGATES[item.setting](runs)}
    grids = {grid.name: grid for grid in exp.grids}
    values = set()
    for spec in runs:
        if item.setting == "trials":
            value = len(exp.seeds)
        elif item.setting.startswith("grid."):
            value = getattr(grids[spec.grid], item.setting.removeprefix("grid."))
        elif item.setting in DERIVED:
            labels = {**_base_labels(exp), **spec.labels}
            value = DERIVED[item.setting](spec.config, labels)
        else:
            value = _path(spec.config, item.setting)
        values.add(_canonical(value))
    return values


def _base_labels(exp):
    """The hyperparameters of ``[run.algorithm]`` as written (expressions unevaluated), as ``algorithm.KEY``."""
    return {f"algorithm.{k}": v for k, v in exp.run.get("algorithm", {}).items() if not isinstance(v, dict)}


@functools.cache
def _experiment(name):
    exp = load_experiment(name)
    return exp, exp.expand()


def _selected(item: Row, name: str):
    exp, runs = _experiment(name)
    if item.grid is not None:
        assert item.grid in {grid.name for grid in exp.grids}, f"{name} has no grid {item.grid!r}"
        runs = [spec for spec in runs if spec.grid == item.grid]
    for path, wanted in item.where.items():
        runs = [spec for spec in runs if _path(spec.config, path) == wanted]
    assert runs, f"{name}: no run matches grid={item.grid!r}, where={item.where!r}"
    return exp, runs


def _normalize(text: str) -> str:
    return " ".join(text.split())


ROWS = [(name, claim, index, item) for name, (_, claims) in SUPPORT.items()
        for claim, items in claims.items() for index, item in enumerate(items)]


def _row_id(entry):
    name, claim, index, item = entry
    return f"{name}:{list(SUPPORT[name][1]).index(claim)}.{index}:{item.setting}"


# ------------------------------------------------------------------------------------------- tests
def test_every_from_paper_entry_has_a_row():
    """(b): the table covers each ``from_paper`` list exactly (no claim without a sentence, no stale row)."""
    with_claims = {}
    for name in builtin_experiments():
        exp, _ = _experiment(name)
        if exp.from_paper:
            with_claims[name] = exp.from_paper
    assert sorted(with_claims) == sorted(SUPPORT), "experiments with a from_paper list and the table differ"
    for name, claims in with_claims.items():
        table = SUPPORT[name][1]
        missing = [c for c in claims if c not in table]
        stale = [c for c in table if c not in claims]
        assert not missing, f"{name}: from_paper entries without a row in SUPPORT: {missing}"
        assert not stale, f"{name}: rows in SUPPORT for entries that are not in from_paper: {stale}"
        assert all(table[c] for c in claims), f"{name}: an entry with no rows"


@pytest.mark.parametrize("entry", ROWS, ids=_row_id)
def test_the_configuration_has_the_claimed_value(entry):
    """(a): the experiment as loaded and expanded by fedopt has the value over the selected runs."""
    name, claim, _, item = entry
    exp, runs = _selected(item, name)
    values = _values(item, exp, runs)
    expected = item.value if isinstance(item.value, (set, frozenset)) else {item.value}
    expected = {_canonical(v) for v in expected}
    if item.includes:
        assert expected <= values, f"{name}: {item.setting} takes {values}, which lacks {expected - values} ({claim!r})"
    else:
        assert values == expected, f"{name}: {item.setting} takes {values}, the paper {expected} ({claim!r})"


@pytest.mark.parametrize("entry", ROWS, ids=_row_id)
def test_the_quote_states_the_value(entry):
    """(c), without the papers: the part of the quote that states the value is in the quote."""
    _, _, _, item = entry
    assert item.quotes and item.shown
    quoted = " ".join(_normalize(q) for q in item.quotes)
    for part in item.shown:
        assert _normalize(part) in quoted, f"{part!r} is not in the quoted sentences {item.quotes}"


@functools.cache
def _paper(file: str) -> str:
    return _normalize((PAPERS / file).read_text(encoding="utf-8"))


QUOTES = sorted({(paper, quote) for name, (paper, claims) in SUPPORT.items()
                 for items in claims.values() for item in items for quote in item.quotes})


@pytest.mark.skipif(not PAPERS.is_dir(), reason=f"the papers' text folder {PAPERS} is missing (shared/papers beside "
                                                "the repository); only the search of the quotes is skipped")
@pytest.mark.parametrize(("paper", "quote"), QUOTES, ids=[f"{p}:{i}" for i, (p, _) in enumerate(QUOTES)])
def test_the_quote_is_in_the_paper(paper, quote):
    """(c): every quoted sentence occurs in the paper's text, whitespace normalized."""
    assert _normalize(quote) in _paper(paper), f"not in {paper}: {quote!r}"
