"""stoke.Loader: the tensors are the C++ pipeline's batches, handed over without a copy; the pool
bound holds; resume is exact; ranks share epochs; errors are named; Ctrl-C and fork behave."""

import gc
import inspect
import io
import json
import os
import signal
import subprocess
import sys
import tarfile
import textwrap
import threading
import time

import pytest
import torch

import stoke

TRANSFORMS = ["random_resized_crop size=16", "random_horizontal_flip", "normalize"]


def make(data, **kw):
    settings = dict(batch_size=4, size=16, transforms=TRANSFORMS, seed=7, threads=2, autotune=False)
    settings.update(kw)
    return stoke.Loader(data, **settings)


def epoch(loader):
    """An epoch's batches as (image bytes, labels, indices), nothing kept of the tensors."""
    return [(b.images.numpy().tobytes(), b.labels.tolist(), b["indices"].tolist()) for b in loader]


def reference_batches(loader, first_epoch, epochs):
    """The C++ pipeline's own batches for the loader's settings, without a Loader (the test tool
    stoke_reference_batches, which ctest names in STOKE_REFERENCE): (pixels, labels, indices)."""
    tool = os.environ.get("STOKE_REFERENCE")
    if not tool:
        pytest.skip("needs the test tool stoke_reference_batches (STOKE_REFERENCE; ctest sets it)")
    out = subprocess.run([tool, json.dumps(loader._settings), str(first_epoch), str(epochs)], check=True,
                         stdout=subprocess.PIPE, text=True).stdout
    return [(bytes.fromhex(b["pixels"]), b["labels"], b["indices"]) for b in map(json.loads, out.splitlines())]


def test_tensors_equal_the_cpp_pipelines_batches_epoch_after_epoch(shapes):
    loader = make(shapes)
    assert len(loader) == 6  # 24 images in batches of 4
    got = epoch(loader) + epoch(loader)
    expected = reference_batches(loader, first_epoch=0, epochs=2)
    assert len(got) == 12
    assert got == expected
    assert got[0][2] != got[6][2]  # each epoch its own order


def test_batches_are_float_nchw_after_normalize_and_uint8_nhwc_without(shapes):
    b = next(iter(make(shapes)))
    assert b.images.dtype == torch.float32 and tuple(b.images.shape) == (4, 3, 16, 16)
    assert b.labels.dtype == torch.int64 and tuple(b.labels.shape) == (4,)  # DataLoader's, cross_entropy's
    assert make(shapes, label_dtype=torch.int32).__iter__().__next__().labels.dtype == torch.int32
    images, labels = b  # DataLoader's pair
    assert images is b.images and labels is b.labels
    assert all(name.endswith(".jpg") for name in b.names)
    raw = next(iter(make(shapes, transforms=["resize size=16"])))
    assert raw.images.dtype == torch.uint8 and tuple(raw.images.shape) == (4, 16, 16, 3)
    with pytest.raises(KeyError, match="no field 'mask'"):
        b["mask"]


def test_the_tensors_view_the_batch_slot_without_a_copy(shapes):
    loader = make(shapes, prefetch=1)  # 3 slots
    addresses = set()
    for b in loader:
        assert b.images.data_ptr() == b._address
        addresses.add(b._address)
    assert len(addresses) <= 3  # the slots, reused


def test_a_loop_that_keeps_tensors_makes_the_loader_wait_never_grow(shapes):
    loader = make(shapes, prefetch=1)  # a pool of 3 slots
    it = iter(loader)
    kept = [next(it).images for _ in range(3)]
    got = []
    taker = threading.Thread(target=lambda: got.append(next(it)))
    taker.start()
    taker.join(timeout=1.0)
    assert taker.is_alive(), "a fourth batch while the loop holds all 3 slots"
    del kept[0]
    gc.collect()
    taker.join(timeout=10)
    assert not taker.is_alive() and len(got) == 1


def test_state_dict_resumes_mid_epoch_with_the_same_batches(shapes):
    first = make(shapes)
    epoch(first)
    it = iter(first)
    for _ in range(2):
        next(it)
    state = first.state_dict()
    assert (state["epoch"], state["position"]) == (1, 8)
    rest = [(b.images.numpy().tobytes(), b.labels.tolist(), b["indices"].tolist()) for b in it]
    resumed = make(shapes)
    resumed.load_state_dict(state)
    assert epoch(resumed) == rest
    assert resumed.state_dict()["epoch"] == 2
    with pytest.raises(ValueError, match="seed=7 but this loader seed=8"):
        make(shapes, seed=8).load_state_dict(state)


def test_set_epoch_picks_the_epoch(shapes):
    loader = make(shapes)
    loader.set_epoch(4)
    assert epoch(loader) == reference_batches(loader, first_epoch=4, epochs=1)


def sourced(loader):
    return next(s["items_out"] for s in loader.stats()["stages"] if s["name"] == "source")


def test_a_loader_told_the_runs_epochs_decodes_nothing_past_the_last(shapes):
    endless, two = make(shapes), make(shapes, epochs=2)
    for _ in range(2):
        assert epoch(two) == epoch(endless)
    deadline = time.monotonic() + 5  # without an end the loader goes on into epoch 2 on its own
    while sourced(endless) <= 48 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert sourced(endless) > 48
    time.sleep(0.1)
    assert sourced(two) == 48  # 2 epochs of 24
    with pytest.raises(ValueError, match="past the run's 2 epochs"):
        epoch(two)
    with pytest.raises(ValueError, match="epochs=0"):
        make(shapes, epochs=0)


def test_an_iteration_replaced_by_a_newer_one_raises_instead_of_mixing_epochs(shapes):
    loader = make(shapes)
    first = iter(loader)
    next(first)
    second = iter(loader)
    assert sum(1 for _ in second) == len(loader)  # (list() would hold every slot: the loader waits)
    with pytest.raises(RuntimeError, match="replaced by a newer one"):
        next(first)


def test_ranks_share_each_epoch_in_equal_parts(shapes):
    seen = []
    for rank in range(5):  # 24 items: padded to 5 each
        loader = make(shapes, rank=rank, world=5, batch_size=2)
        assert len(loader) == 3
        indices = [i for _, _, batch in epoch(loader) for i in batch]
        assert len(indices) == 5
        seen += indices
    assert sorted(set(seen)) == list(range(24))


def test_an_unreadable_file_is_skipped_and_named_or_fails_naming_it(shapes_copy):
    first_class = sorted(p for p in shapes_copy.iterdir() if p.is_dir())[0]
    bad = sorted(first_class.iterdir())[0]
    bad.write_bytes(b"not a jpeg")
    loader = make(shapes_copy, shuffle=False)
    assert sum(len(labels) for _, labels, _ in epoch(loader)) == 23
    skipped = loader.stats()["skipped_files"]
    assert skipped and all(s["file"] == str(bad) for s in skipped)
    with pytest.raises(RuntimeError, match=str(bad)):
        epoch(make(shapes_copy, on_error="fail"))


def test_what_the_dataset_leaves_out_is_counted_and_named_apart_from_the_skips(shapes, tmp_path):
    """A WebDataset shard with a sample whose .cls is not a number and a symlink member: the
    dataset leaves both out when it opens, and stats() counts and names them apart from the
    skipped files, before the first batch and after."""
    shard = tmp_path / "shard.tar"

    def add(tar, name, data):
        info = tarfile.TarInfo(name)
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))

    with tarfile.open(shard, "w") as tar:
        for label, folder in enumerate(sorted(p for p in shapes.iterdir() if p.is_dir())):
            for i, image in enumerate(sorted(folder.iterdir())[:8]):
                add(tar, f"c{label}_{i:02d}.jpg", image.read_bytes())
                add(tar, f"c{label}_{i:02d}.cls", str(label).encode())
        add(tar, "bad.jpg", image.read_bytes())
        add(tar, "bad.cls", b"banana")
        link = tarfile.TarInfo("link.jpg")
        link.type = tarfile.SYMTYPE
        link.linkname = "c0_00.jpg"
        tar.addfile(link)

    loader = make(shard, shuffle=False)
    expected = {f"{shard}#bad.cls": "not a decimal class label", f"{shard}#link.jpg": "not a regular file"}
    for when in ("before", "after"):
        stats = loader.stats()
        assert stats["left_out"] == 2, when
        left_out = {f["file"]: f["reason"] for f in stats["left_out_files"]}
        assert set(left_out) == set(expected), (when, left_out)
        for file, reason in expected.items():
            assert reason in left_out[file], (when, left_out)
        assert stats["skipped"] == 0 and stats["skipped_files"] == [], when
        if when == "before":
            assert sum(len(labels) for _, labels, _ in epoch(loader)) == 16  # the good samples, all of them


def test_remote_shards_give_the_same_batches_and_stats_say_what_the_network_cost(shapes, tmp_path):
    """A tar shard served over loopback HTTP (tests/remote/range_server.py), read with range
    requests and through a cache folder, gives the batches the same shard gives on disk, and
    stats()["network"] counts the requests and the cache's use (None for the local shard)."""
    served = tmp_path / "served"
    served.mkdir()
    with tarfile.open(served / "train.tar", "w") as tar:
        for label, folder in enumerate(sorted(p for p in shapes.iterdir() if p.is_dir())):
            for i, image in enumerate(sorted(folder.iterdir())[:6]):
                key = f"c{label}_{i:02d}"
                for name, data in ((key + ".jpg", image.read_bytes()), (key + ".cls", str(label).encode())):
                    info = tarfile.TarInfo(name)
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))
    script = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "remote", "range_server.py")
    server = subprocess.Popen([sys.executable, script, str(served)], stdout=subprocess.PIPE, text=True)
    try:
        url = f"http://127.0.0.1:{server.stdout.readline().strip()}/files/train.tar"
        local = make(served / "train.tar", shuffle=False)
        want = epoch(local)
        assert local.stats()["network"] is None
        for fmt in ("tar", f"tar cache={tmp_path / 'cache'} cache_bytes=64M"):
            remote = make(url, shuffle=False, format=fmt)
            assert epoch(remote) == want, fmt
            network = remote.stats()["network"]
            assert network["requests"] > 0 and network["bytes"] > 0, network
            assert network["cached"] == ("cache=" in fmt), network
            if network["cached"]:
                assert network["cache_hits"] >= 12 and network["cache_bytes"] > 0, network
    finally:
        server.kill()
        server.wait()


def test_bad_arguments_name_the_thing(shapes, tmp_path):
    with pytest.raises(FileNotFoundError, match="nothing-here"):
        make(tmp_path / "nothing-here")
    with pytest.raises(ValueError, match="no_such_transform"):
        make(shapes, transforms=["no_such_transform size=3"])
    with pytest.raises(ValueError, match="on_error must be skip or fail"):
        make(shapes, on_error="ignore")
    with pytest.raises(ValueError, match="device='meta'; it takes 'cpu', 'cuda' or 'cuda:N'"):
        make(shapes, device="meta")
    if not torch.cuda.is_available():
        with pytest.raises(RuntimeError, match="sees no CUDA device"):
            make(shapes, device="cuda:0")


@pytest.mark.skipif(not os.environ.get("STOKE_EXAMPLE_PLUGIN"), reason="needs examples/plugin (STOKE_EXAMPLE_PLUGIN)")
def test_a_plugins_transform_runs_in_the_loader(shapes):
    plugin = os.environ["STOKE_EXAMPLE_PLUGIN"]
    plain = next(iter(make(shapes, transforms=["resize size=16"], shuffle=False)))
    windowed = next(iter(make(shapes, transforms=["resize size=16", "window center=64 width=32"], shuffle=False,
                              plugins=[plugin])))
    assert windowed.images.shape == plain.images.shape
    assert not torch.equal(windowed.images, plain.images)
    assert int(windowed.images.max()) == 255  # pixels above center + width / 2 stretched to the top


def test_a_coco_set_opens_with_its_annotations_and_yields_boxes(shapes, tmp_path):
    """format="coco annotations=FILE": the boxes travel beside the pixels, scaled with the image."""
    images = sorted(next(p for p in shapes.iterdir() if p.is_dir()).iterdir())[:4]
    entries = [{"id": i + 1, "file_name": image.name, "width": 16, "height": 16} for i, image in enumerate(images)]
    boxes = [{"id": 1, "image_id": 2, "category_id": 7, "bbox": [0, 0, 16, 8], "iscrowd": 1}]
    annotations = tmp_path / "instances.json"
    annotations.write_text(json.dumps({"images": entries, "annotations": boxes,
                                       "categories": [{"id": 7, "name": "square"}]}))
    loader = make(images[0].parent, transforms=["resize size=8"], size=8, shuffle=False,
                  format=f"coco annotations={annotations}")
    batch = next(iter(loader))
    assert batch["box_counts"].tolist() == [0, 1, 0, 0]
    assert batch["boxes"][1, 0].tolist() == [0.0, 0.0, 8.0, 4.0]  # 16 px -> 8 px
    assert batch["box_classes"][1, 0].item() == 0 and batch["box_extras"][1, 0, 0].item() == 1.0  # iscrowd
    with pytest.raises(ValueError, match="missing required parameter 'annotations'"):
        make(images[0].parent, format="coco")
    with pytest.raises(ValueError, match="unknown data format 'zip'; known: cifar, coco"):
        make(shapes, format="zip")


@pytest.mark.skipif(not os.environ.get("STOKE_TEST_FORMAT_PLUGIN"), reason="needs the test format plugin")
def test_a_plugins_data_format_opens_by_name_and_by_guess(tmp_path):
    plugin = os.environ["STOKE_TEST_FORMAT_PLUGIN"]
    data = tmp_path / "set.stripes"
    data.write_text("".join(f"{i % 3}\n" for i in range(8)))
    for format in ("auto", "stripes side=16"):
        batch = next(iter(make(data, transforms=["resize size=16"], shuffle=False, plugins=[plugin], format=format)))
        assert batch.labels.tolist() == [0, 1, 2, 0], format
        assert batch.images[:, :, :, 0].float().mean(dim=(1, 2)).tolist() == [0.0, 40.0, 80.0, 0.0], format


def thread_nice_values():
    """The nice value of each of this process's threads (/proc/self/task/*/stat, field 19)."""
    values = []
    for task in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{task}/stat") as f:
                values.append(int(f.read().rsplit(")", 1)[1].split()[16]))
        except FileNotFoundError:  # the thread ended meanwhile
            pass
    return values


def test_the_loaders_threads_work_below_the_loops_priority(shapes):
    own = os.getpriority(os.PRIO_PROCESS, 0)
    if own >= 9:
        pytest.skip(f"this process already runs at nice {own}")
    assert stoke.Loader.__init__.__defaults__ is not None and stoke.loader.NICE == 10
    loader = make(shapes, nice=9)
    # A thread is at nice 9 while it runs one of the pipeline's tasks: look while batches are made.
    seen = set()
    deadline = time.monotonic() + 30
    while 9 not in seen and time.monotonic() < deadline:
        for _ in loader:
            seen.update(thread_nice_values())
            assert os.getpriority(os.PRIO_PROCESS, 0) == own  # the training loop's thread keeps its own
    assert 9 in seen
    with pytest.raises(ValueError, match="nice=20"):
        make(shapes, nice=20)


def test_stats_and_report(shapes, tmp_path):
    loader = make(shapes)
    epoch(loader)
    stats = loader.stats()
    assert stats["batches"] == 6 and stats["images"] == 24
    assert {s["name"] for s in stats["stages"]} >= {"read", "loader"}
    assert stats["bottleneck"]
    loader.write_report(tmp_path / "loader.json")
    assert '"batches": 6' in (tmp_path / "loader.json").read_text()


def run_python(code, **kw):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(code)], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, **kw)


def test_ctrl_c_interrupts_a_wait_for_a_batch(shapes):
    # The loop holds every slot, so the next batch never comes: only Ctrl-C ends the wait.
    child = run_python(f"""
        import stoke, sys
        loader = stoke.Loader({str(shapes)!r}, batch_size=4, size=16, prefetch=1,
                              transforms=["random_resized_crop size=16"])
        it = iter(loader)
        kept = [next(it) for _ in range(3)]
        print("waiting", flush=True)
        try:
            next(it)
        except KeyboardInterrupt:
            print("interrupted", flush=True)
            sys.exit(0)
        sys.exit(3)
    """)
    assert child.stdout.readline().strip() == "waiting"
    time.sleep(0.3)
    child.send_signal(signal.SIGINT)
    out, _ = child.communicate(timeout=60)  # a guard against a hang, not a speed check
    assert child.returncode == 0, out
    assert "interrupted" in out


def test_a_forked_child_gets_an_error_not_a_hang(shapes):
    loader = make(shapes)
    it = iter(loader)
    next(it)
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            next(it)
        except RuntimeError as e:
            code = 0 if "forked" in str(e) else 2
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
    assert next(it).images.shape[0] == 4  # the parent goes on


def test_the_binding_is_the_one_asked_for():
    # ctest runs this suite twice: with the pybind11 extension and with the C ABI through ctypes.
    wanted = os.environ.get("STOKE_BINDING")
    if wanted:
        assert stoke.binding.__name__ == {"pybind11": "stoke._native", "ctypes": "stoke._cabi"}[wanted]


@pytest.mark.skipif(stoke.binding.__name__ != "stoke._cabi", reason="the C ABI's capsules, made by ctypes")
def test_a_tensor_no_capsule_took_gives_its_slot_back(shapes):
    # In a child, which leaves with os._exit: a loader whose slots leaked would wait for them when freed.
    child = run_python(f"""
        import ctypes, os, stoke
        from stoke import _cabi
        loader = stoke.Loader({str(shapes)!r}, batch_size=4, size=16, prefetch=1,  # 3 slots
                              transforms=["random_resized_crop size=16"])
        loader._native.begin()
        made = _cabi._new_capsule

        def no_memory(*args):
            raise MemoryError("no capsule")

        _cabi._new_capsule = no_memory
        for _ in range(3):  # as many batches as slots: a fourth comes only if they went back
            try:
                loader._native.next()
                os._exit(3)
            except MemoryError:
                pass
        _cabi._new_capsule = made
        batch = ctypes.c_void_p()  # one wait of at most 10 s (the binding's next() waits on and on)
        print("status", _cabi._lib.stoke_loader_next(loader._native._handle, 10_000, ctypes.byref(batch)), flush=True)
        os._exit(0)
    """)
    out, _ = child.communicate(timeout=60)
    assert child.returncode == 0, out
    assert "status 1" in out, "no batch (1) within 10 s: the loader waited for a slot a failed capsule kept"


def test_the_binding_names_a_setting_it_does_not_know_or_of_the_wrong_type(shapes):
    with pytest.raises(ValueError, match="no setting 'bogus'"):
        stoke.binding.NativeLoader(json.dumps({"data": str(shapes), "bogus": 1}))
    with pytest.raises(ValueError, match="'batch_size' has the wrong type"):
        stoke.binding.NativeLoader(json.dumps({"data": str(shapes), "batch_size": "many"}))
    with pytest.raises(ValueError, match="not a JSON object"):
        stoke.binding.NativeLoader("[1, 2")



def test_the_signature_and_the_docstring_come_from_the_cpp_declaration(shapes):
    declared = json.loads(stoke.binding.loader_settings())
    names = [d["name"] for d in declared]
    assert names[:3] == ["data", "transforms", "batch_size"] and "epochs" in names
    parameters = inspect.signature(stoke.Loader).parameters
    assert list(parameters) == names + ["device", "label_dtype"]
    for d in declared[2:]:
        assert parameters[d["name"]].default == d["default"], d["name"]
        assert f"        {d['name']}: " in stoke.Loader.__doc__, d["name"]
    assert parameters["threads"].default is None and parameters["nice"].default == 10
    with pytest.raises(TypeError, match="no setting 'batchsize'; it takes batch_size, size"):
        stoke.Loader(shapes, batchsize=4)
    # Python's values become the declared types; None means the declared default.
    loader = make(shapes, batch_size=4.0, threads=None, cpu_budget=None, format=None, transforms=TRANSFORMS[0])
    assert loader._settings["batch_size"] == 4 and loader._settings["threads"] is None
    assert loader._settings["format"] == "auto" and loader._settings["transforms"] == [TRANSFORMS[0]]
    with pytest.raises(ValueError, match="cpu_budget=0: at least 1 core"):
        make(shapes, cpu_budget=0)



@pytest.mark.parametrize("normalize", ["normalize", "normalize mean=0.5 std=0.25"])
def test_a_normalize_left_to_the_device_gives_the_pipelines_tensors(shapes, normalize):
    transforms = TRANSFORMS[:2] + [normalize]
    there = make(shapes, transforms=transforms, normalize_on_device=True)  # on the CPU here: the same code
    here = make(shapes, transforms=transforms, normalize_on_device=False)
    assert "nhwc u8, images normalized to float32 NCHW" in there.shape and "nchw f32" in here.shape
    worst, count = 0.0, 0
    for a, b in zip(there, here):  # the same seed: the same crops and flips
        assert a.images.dtype == torch.float32 and a.images.is_contiguous() and a.images.shape == b.images.shape
        assert torch.equal(a.labels, b.labels)
        worst = max(worst, (a.images - b.images).abs().max().item())
        count += 1
    assert count == len(here) and worst == 0.0, worst  # the same float32 operations, in the same order
    # The choice: on by default for a GPU (its test below), off for the CPU, as asked otherwise.
    assert stoke.loader._leave_normalize(None, "cuda") and stoke.loader._leave_normalize(None, "cuda:1")
    assert not stoke.loader._leave_normalize(None, "cpu") and not stoke.loader._leave_normalize(False, "cuda")
    assert here._settings["normalize_on_device"] is False
    # Without a trailing normalize there is nothing to leave: the batches stay as they were.
    plain = make(shapes, transforms=TRANSFORMS[:2], normalize_on_device=True)
    assert next(iter(plain)).images.dtype == torch.uint8


cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


@cuda
def test_on_cuda_the_batches_equal_the_cpu_loaders_on_the_device(shapes):
    on_cpu = [(b.images.clone(), b.labels.clone()) for b in make(shapes)]
    side = torch.cuda.Stream()
    loader = make(shapes, device="cuda")
    assert "nhwc u8, images normalized" in loader.shape  # the host batches are uint8: a quarter of the bytes
    with torch.cuda.stream(side):  # ordered on whichever stream is current when a batch is yielded
        on_gpu = [(b.images, b.labels) for b in loader]
    torch.cuda.synchronize()
    assert len(on_gpu) == len(on_cpu) == 6
    for (images, labels), (cpu_images, cpu_labels) in zip(on_gpu, on_cpu):
        assert images.is_cuda and labels.is_cuda and labels.dtype == torch.int64
        assert torch.equal(labels.cpu(), cpu_labels)
        # Shipped as uint8 and normalized on the GPU (normalize_on_device): the same to float rounding.
        assert images.dtype == torch.float32 and torch.allclose(images.cpu(), cpu_images, rtol=0, atol=1e-6)


@cuda
def test_on_cuda_a_loop_that_keeps_tensors_holds_device_memory_not_slots(shapes):
    loader = make(shapes, device="cuda", prefetch=1)  # a pool of 3 slots, 6 batches an epoch
    kept = [b.images for b in loader]  # would hang on the CPU (test above); here the slots come back
    assert len(kept) == 6 and all(t.is_cuda for t in kept)
    loader.close()
    with pytest.raises(RuntimeError, match="closed"):
        next(iter(loader))


@cuda
def test_on_cuda_iterating_makes_no_host_synchronisation(shapes):
    loader = make(shapes, device="cuda")
    torch.cuda.set_sync_debug_mode("error")  # torch raises on an operation that waits for the GPU
    try:
        n = sum(1 for _ in loader)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert n == 6
