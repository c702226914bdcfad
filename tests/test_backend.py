"""Backend selection: lazy probing, clear errors, and a broken CuPy that must not break anything."""

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import fedopt
from fedopt import _backend


def run_python(code, extra_path=None):
    env = {**os.environ, **({"PYTHONPATH": str(extra_path)} if extra_path else {})}
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=env,
                          timeout=120)


def test_import_is_lazy():
    """Importing fedopt and its regularizers imports neither CuPy nor Numba, nor scipy's sparse
    linear algebra and graph modules (0.2 s together)."""
    result = run_python(
        """
        import sys, fedopt, fedopt.regularizers
        fedopt.regularizers.L1(1.0)
        print(sorted(m for m in ("cupy", "numba", "scipy.sparse.linalg", "scipy.sparse.csgraph") if m in sys.modules))
        """
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_the_cpu_kernels_make_idle_openmp_threads_sleep_unless_the_environment_says_otherwise():
    """Spinning threads of two processes on the same cores wait for each other's time slices
    (bench/bench_wait_policy.py): the kernels set OMP_WAIT_POLICY before Numba starts its threads."""
    code = """
        import os
        import fedopt.kernels.cpu
        print(os.environ.get("OMP_WAIT_POLICY"))
        """
    clean = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    for preset, expected in (({}, "passive"), ({"OMP_WAIT_POLICY": "active"}, "active"),
                             ({"GOMP_SPINCOUNT": "1000"}, "None")):
        result = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                                env={**clean, **preset}, timeout=120)
        assert result.returncode == 0, result.stderr
        assert result.stdout.strip() == expected, preset


def test_cpu_backends_and_names():
    assert _backend.get_backend("numpy").name == "numpy"
    numba_backend = _backend.get_backend("numba")
    assert numba_backend.name == "numba" and numba_backend.xp is np
    assert _backend.get_backend(numba_backend) is numba_backend
    assert {"numpy", "numba"} <= set(fedopt.available_backends())
    assert _backend.get_backend("auto").name in ("numba", "gpu")


def test_unknown_backend_is_refused():
    with pytest.raises(ValueError, match=r"backend='cuda' is unknown.*'numpy', 'numba', 'gpu', 'auto'"):
        _backend.get_backend("cuda")
    with pytest.raises(ValueError, match="backend='torch'"):
        fedopt.regularizers.L1(1.0).prox(np.ones(3), 1.0, backend="torch")


def test_canonical_dtypes():
    backend = _backend.get_backend("numba")
    assert backend.asarray(np.arange(3)).dtype == np.float64
    assert backend.asarray(np.ones(3, np.float32)).dtype == np.float32
    assert backend.asarray(np.ones(3, np.float16)).dtype == np.float64
    assert backend.asarray(np.ones((3, 4), order="F")).flags.c_contiguous


@pytest.mark.skipif(_backend.gpu_available(), reason="a working GPU is present")
def test_gpu_backend_without_gpu_says_why():
    with pytest.raises(_backend.BackendUnavailableError, match=r"backend='gpu' is unavailable: .*backend='numba'"):
        _backend.get_backend("gpu")


@pytest.mark.parametrize(
    "fake_cupy",
    [
        # installed, imports, but no driver: the first call into the runtime fails
        """
        class _Runtime:
            @staticmethod
            def getDeviceCount():
                raise RuntimeError("cudaErrorNoDevice: no CUDA-capable device is detected")
        class cuda:
            runtime = _Runtime
        """,
        # installed without its CUDA libraries: the import itself fails
        'raise OSError("libcudart.so.12: cannot open shared object file")',
        # a device is listed, but the compiler (NVRTC) is missing: only JIT kernels fail
        """
        class _Runtime:
            @staticmethod
            def getDeviceCount():
                return 1
        class cuda:
            runtime = _Runtime
        def zeros(*args, **kwargs):
            return None
        float32 = "float32"
        def ElementwiseKernel(*args, **kwargs):
            raise RuntimeError("nvrtc: libnvrtc.so not found")
        """,
    ],
    ids=["no_driver", "no_libraries", "no_nvrtc"],
)
def test_broken_cupy_leaves_cpu_working(tmp_path, fake_cupy):
    (tmp_path / "cupy").mkdir()
    (tmp_path / "cupy" / "__init__.py").write_text(textwrap.dedent(fake_cupy))
    result = run_python(
        """
        import numpy as np
        import fedopt
        from fedopt import _backend, regularizers
        assert _backend.get_backend("auto").name == "numba"
        assert fedopt.available_backends() == ["numpy", "numba"]
        print("prox:", (regularizers.L1(1.0).prox(np.array([3.0, -0.5]), 1.0) + 0.0).tolist())
        try:
            _backend.get_backend("gpu")
        except _backend.BackendUnavailableError as exc:
            print("refused:", exc)
        """,
        extra_path=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    assert "prox: [2.0, 0.0]" in result.stdout
    assert "refused: backend='gpu' is unavailable" in result.stdout


def test_numba_cache_switch(monkeypatch):
    monkeypatch.setenv("FEDOPT_NUMBA_CACHE", "0")
    assert not _backend.numba_cache_enabled()
    monkeypatch.setenv("FEDOPT_NUMBA_CACHE", "1")
    assert _backend.numba_cache_enabled()


@pytest.mark.parametrize("batched", [False, True], ids=["run", "run_batch"])
def test_numba_rounds_hold_blas_to_one_thread(batched):
    """On Numba's threads, a run (set-up and evaluations included) holds BLAS to one thread, whose
    idle threads would otherwise spin on the cores that the kernels need, and gives BLAS its
    threads back after."""
    import numba
    from threadpoolctl import threadpool_info, threadpool_limits

    if numba.config.NUMBA_NUM_THREADS < 2:
        pytest.skip("needs two Numba threads")

    def blas_threads():
        return max(info["num_threads"] for info in threadpool_info() if info["user_api"] == "blas")

    data = fedopt.datasets.make_sparse_regression(n_samples=60, n_features=4, n_informative=2, n_clients=3, seed=0)
    problem = fedopt.problems.LeastSquares(data, backend="numba")
    seen = []
    previous = numba.get_num_threads()
    numba.set_num_threads(2)
    try:
        with threadpool_limits(2, user_api="blas"):
            assert blas_threads() == 2
            options = dict(rounds=2, local_steps=2, lr_local=0.01, callback=lambda *_: seen.append(blas_threads()))
            if batched:
                fedopt.run_batch("fednmap", problem, seeds=[0, 1], **options)
            else:
                fedopt.run("fednmap", problem, **options)
            assert seen and set(seen) == {1}
            assert blas_threads() == 2
    finally:
        numba.set_num_threads(previous)


def test_the_library_passes_numba_kernels_writeable_arrays(monkeypatch):
    """Numba compiles a kernel once per read-only flag of its array arguments (5-15 s each): a batch
    of weighted-l1 runs and a centered l2 ball pass every kernel writeable arrays only, so that
    they share the variants of single runs and unweighted proxes (the batch's correction ``D``
    and the regularizers' read-only weights and centers each compiled one more)."""
    from fedopt.kernels.cpu import _jit, elementwise, mixing, mlp, models, rows
    from fedopt.regularizers import L1, L2Ball

    calls = []

    def recorded(name, compiled):
        def call(*args):
            calls.append((name, args))
            return compiled(*args)

        return call

    for module in (elementwise, mixing, mlp, models, rows):
        for name, kernel in vars(module).items():
            if isinstance(kernel, _jit.Kernel):
                monkeypatch.setattr(kernel, "serial", recorded(name, kernel.serial))
                monkeypatch.setattr(kernel, "parallel", recorded(name, kernel.parallel))
    data = fedopt.datasets.make_sparse_regression(n_samples=60, n_features=4, n_informative=2, n_clients=3, seed=0)
    problem = fedopt.problems.LeastSquares(data, backend="numba")
    weighted = L1(0.01, weights=np.arange(1.0, 1.0 + problem.n_params))
    fedopt.run_batch("fednmap", problem, weighted, seeds=[0, 1], rounds=2, local_steps=2, lr_local=0.01)
    L2Ball(1.0, center=np.ones(problem.n_params)).prox(np.zeros((3, problem.n_params)), 1.0)
    names = {name for name, _ in calls}
    assert {"local_steps_kernel", "prox_elementwise_kernel", "_l2_ball_rows"} <= names
    read_only = [(name, i) for name, args in calls for i, arg in enumerate(args)
                 if isinstance(arg, np.ndarray) and not arg.flags.writeable]
    assert not read_only


def test_thread_count_follows_numba_in_every_thread():
    """The kernels' thread count (read without Numba's launch locks) is ``numba.get_num_threads()``
    after ``set_num_threads`` and in a new thread, which starts from Numba's default."""
    import threading

    import numba

    from fedopt.kernels.cpu._jit import thread_count

    previous = numba.get_num_threads()
    try:
        for n in {1, numba.config.NUMBA_NUM_THREADS}:
            numba.set_num_threads(n)
            assert thread_count() == numba.get_num_threads() == n
        seen = []
        worker = threading.Thread(target=lambda: seen.append((thread_count(), numba.get_num_threads())))
        worker.start()
        worker.join()
        assert seen[0][0] == seen[0][1]
    finally:
        numba.set_num_threads(previous)


@pytest.mark.parametrize("numba_cache_dir", [False, True], ids=["__pycache__", "NUMBA_CACHE_DIR"])
def test_stale_numba_cache_is_dropped_when_any_kernel_source_changes(tmp_path, monkeypatch, numba_cache_dir):
    """A kernel's cache holds the helpers it compiled in from other files, which Numba does not
    check: the cache of a kernel folder goes when any of its sources (or the package's constants)
    changes, and stays while none does; in ``NUMBA_CACHE_DIR`` too, where Numba keeps it when set."""
    from numba.core import config

    from fedopt.kernels.cpu._jit import cache_folder, drop_stale_cache

    monkeypatch.setattr(config, "CACHE_DIR", str(tmp_path / "numba-cache") if numba_cache_dir else "")
    folder = tmp_path / "kernels" / "cpu"
    folder.mkdir(parents=True)
    cache = cache_folder(folder)
    assert (cache.parent == tmp_path / "numba-cache") if numba_cache_dir else (cache == folder / "__pycache__")
    cache.mkdir(parents=True)
    (tmp_path / "kernels" / "__init__.py").write_text("SOFT = 1\n")
    (folder / "models.py").write_text("def kernel(): pass\n")
    (folder / "minibatch.py").write_text("def helper(): pass\n")
    cached = [cache / name for name in ("models.kernel-1.py311.nbi", "models.kernel-1.py311.1.nbc")]

    def cache_again():
        for path in cached:
            path.write_bytes(b"compiled")

    cache_again()
    assert drop_stale_cache(folder)  # no digest yet: whatever is there may be stale
    assert not any(path.exists() for path in cached)
    cache_again()
    assert not drop_stale_cache(folder) and all(path.exists() for path in cached)
    (folder / "minibatch.py").write_text("def helper(): return 1\n")  # a helper only
    assert drop_stale_cache(folder) and not any(path.exists() for path in cached)
    cache_again()
    (tmp_path / "kernels" / "__init__.py").write_text("SOFT = 2\n")
    assert drop_stale_cache(folder) and not any(path.exists() for path in cached)
    assert (folder / "minibatch.py").exists() and list(cache.glob("*.sha256"))
