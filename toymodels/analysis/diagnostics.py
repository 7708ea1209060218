"""Hidden-state diagnostics: how a residual network uses its layers.

The functions at the top take any stack of hidden states, a tensor (layers + 1, samples, width)
holding h_0 … h_L, so they serve the toy teachers and students and any model that exposes its
hidden states. `diagnose_run` applies them to the teachers and trained students of a run and
adds layer-removal probes, which need the networks themselves.
"""

import math

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F
from scipy.cluster.vq import kmeans2
from tqdm.auto import tqdm

from ..columns import SLOT, STUDENT
from ..errors import ToymodelsError
from ..models.blocks import rmsnorm
from ..models.students import StudentSpec
from ..results.certification import with_starts
from ..results.noise import chunk_noise
from ..results.storage import RunFolder
from ..training.population import Population
from ..training.protocol import Protocol


def angle(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Angle between vectors along the last axis, in radians."""
    return torch.arccos(F.cosine_similarity(a, b, dim=-1).clamp(-1, 1))


def layer_profile(states: torch.Tensor) -> pd.DataFrame:
    """Per layer l (sample means): rotation θ(h_l, h_{l+1}); successive-update angle
    θ(Δh_l, Δh_{l+1}) with Δh_l = h_{l+1} − h_l; norm ‖h_l‖; angle to the end θ(h_l, h_L);
    progress s_l = ⟨h_l − h_0, h_L − h_0⟩ / ‖h_L − h_0‖²; update norm ‖Δh_l‖."""
    updates = states[1:] - states[:-1]
    travel = states[-1] - states[0]
    progress = ((states - states[0]) * travel).sum(-1) / travel.square().sum(-1).clamp_min(1e-30)
    nan = torch.full((1,), math.nan)
    return pd.DataFrame(
        {
            "layer": np.arange(len(states)),
            "rotation": torch.cat([angle(states[:-1], states[1:]).mean(-1), nan]).numpy(),
            "update_angle": torch.cat([angle(updates[:-1], updates[1:]).mean(-1), nan, nan]).numpy(),
            "norm": states.norm(dim=-1).mean(-1).numpy(),
            "angle_to_end": angle(states, states[-1:]).mean(-1).numpy(),
            "progress": progress.mean(-1).numpy(),
            "update_norm": torch.cat([updates.norm(dim=-1).mean(-1), nan]).numpy(),
        }
    )


def angular_distance(states: torch.Tensor) -> np.ndarray:
    """Gromov angular distance d(h_i, h_j) = arccos(cos)/π for all pairs of layers, sample mean."""
    unit = F.normalize(states, dim=-1)
    cosines = torch.einsum("isd,jsd->ijs", unit, unit).clamp(-1, 1)
    return (torch.arccos(cosines) / math.pi).mean(-1).numpy()


def effective_layers(states: torch.Tensor) -> float:
    """N_eff = (Σ‖Δh_l‖)² / Σ‖Δh_l‖² per sample, averaged: the number of layers that would
    carry the same total update if they all moved equally (L for even use, 1 for one layer)."""
    sizes = (states[1:] - states[:-1]).norm(dim=-1)
    return float((sizes.sum(0).square() / sizes.square().sum(0).clamp_min(1e-30)).mean())


def middle(count: int) -> slice:
    """The middle half of `count` layers (all of them when there are fewer than four)."""
    return slice(count // 4, count - count // 4) if count >= 4 else slice(0, count)


def middle_layers(depth: int) -> range:
    return range(depth)[middle(depth)]


def trajectory_groups(states: torch.Tensor, groups: int = 2, seed: int = 0) -> pd.DataFrame:
    """Cluster per-sample rotation trajectories θ_l (PCA to at most 3 components, then k-means):
    each group's share of samples, and where in depth its rotation happens (the centre of mass of
    θ_l over l/L; ≈ 0.5 for evenly updated samples, small for samples that exit early)."""
    trajectories = angle(states[:-1], states[1:]).T.numpy()  # (samples, layers)
    centred = trajectories - trajectories.mean(0)
    _, _, components = np.linalg.svd(centred, full_matrices=False)
    scores = centred @ components[: min(3, len(components))].T
    _, labels = kmeans2(scores, groups, seed=seed, minit="++")
    position = (np.arange(trajectories.shape[1]) + 0.5) / trajectories.shape[1]
    rows = []
    for group in range(groups):
        mine = trajectories[labels == group]
        if len(mine):
            profile = mine.mean(0)
            rows.append(
                {
                    "share": len(mine) / len(trajectories),
                    "rotation_centre": float((profile * position).sum() / profile.sum()),
                    "mean_rotation": float(profile.mean()),
                }
            )
    return pd.DataFrame(rows).sort_values("share", ascending=False, ignore_index=True)


def load_students(folder: RunFolder) -> Population:
    """The run's teachers (rebuilt from its seed) and every trained student, each of its starts, on the CPU."""
    path = folder.path / RunFolder.STUDENTS
    if folder.unfinished_jobs():
        raise ToymodelsError(f"{folder.path} is unfinished: `toymodels run --resume {folder.path}` first")
    if not path.is_file():
        raise ToymodelsError(f"{folder.path} has no {RunFolder.STUDENTS}: re-run it with --save-students")
    protocol = Protocol.of(folder.runnable_config()).replace(device="cpu", compile=False)
    every = Population(protocol, torch.device("cpu"))
    try:
        every.students.load_state_dict(folder.students()["state_dict"])
    except RuntimeError:  # whole, but of other students than this run's
        raise ToymodelsError(f"{path} holds other students than this run's") from None
    return every


def load_trained(folder: RunFolder) -> Population:
    """The run's teachers and its trained students, on the CPU: of each (teacher instance,
    temperature, depth), the student α is fitted on, the best of its starts."""
    every = load_students(folder)
    return Population(
        every.protocol,
        torch.device("cpu"),
        specs=best_students(folder.metrics(), every),
        reuse=every,
        weights_from=every.students,
    )


def test_loss_noise(population: Population, chunk: int = 64) -> pd.DataFrame:
    """Each student's test loss with its standard error `test_se` and `relative_noise` (se / loss),
    from the spread over `chunk`-sample pieces of the test set: one row per student, its keys first."""
    return chunk_noise(test_chunk_table(population, chunk))


def test_chunk_table(population: Population, chunk: int | None = None) -> pd.DataFrame:
    """Each student's mean loss on each `chunk`-sample piece of the test set (default: a test batch),
    tidy: its keys, `chunk` (the piece's index) and `loss`. Runs of the same teachers and seed test on
    the same samples, so their students compare piece by piece (results/ladder.py pairs its rungs)."""
    with torch.no_grad():
        chunks = population.test_chunk_losses(chunk).double().numpy()
    keys = pd.DataFrame(network_keys(population)).query("network == 'student'").drop(columns="network")
    return pd.concat([keys.assign(chunk=piece, loss=losses) for piece, losses in enumerate(chunks)], ignore_index=True)


def test_set_noise(folder: RunFolder, chunk: int = 64) -> pd.DataFrame:
    """Is a converged student's test/train ratio off 1 by more than the noise of its two estimates?
    On fresh samples both estimate one number: its final weights on the fixed test set, and the
    mean over its last plateau window. One row per converged student of the fit (its best start)
    with its test loss's standard error `test_se` (`test_loss_noise`), the train loss's `train_se`
    (scaled by the samples each saw, check_every × batch: the weights barely move in that window)
    and z = (test − train) / √(se_test² + se_train²). The students of one teacher (and T) share
    its test set, and so part of their z."""
    population = load_trained(folder)
    config = population.config
    table = test_loss_noise(population, chunk).drop(columns="relative_noise")
    pieces = config.test_batches * config.test_batch_size / chunk
    table = table.assign(train_se=table.test_se * math.sqrt(pieces * chunk / (config.check_every * config.batch)))
    metrics = folder.metrics()
    converged = metrics[metrics.converged_at_step.notna()]
    table = table.merge(converged[[*STUDENT, "train_loss", "test_loss"]], on=STUDENT)
    return table.assign(z=(table.test_loss - table.train_loss) / np.hypot(table.test_se, table.train_se))


def best_students(metrics: pd.DataFrame, population: Population) -> list[StudentSpec]:
    """Of each (teacher instance, temperature, depth), the start whose last test loss is lowest."""
    metrics = with_starts(metrics)
    last = metrics[metrics.step == metrics.groupby(STUDENT, dropna=False).step.transform("max")]
    temperatures = population.protocol.temperatures
    instances = population.config.teacher_instances
    best = last.loc[last.groupby(SLOT, dropna=False).test_loss.idxmin()]
    chosen = {
        (instances.index((row.teacher, row.replicate)), _index_of(temperatures, row.temperature), row.depth): row.start
        for row in best.itertuples()
    }
    return [
        spec
        for spec in population.specs
        if chosen.get((spec.instance, spec.temperature_index, spec.depth), spec.start) == spec.start
    ]


def _index_of(temperatures, temperature) -> int:
    return (
        0
        if math.isnan(temperature)
        else min(range(len(temperatures)), key=lambda k: abs(temperatures[k] - temperature))
    )


def network_keys(population: Population) -> list[dict]:
    """Teacher instances first, then students in population order (with the start each began
    from: the best of its starts, see `load_trained`)."""
    temperatures = population.protocol.temperatures
    teachers = [
        {
            "network": "teacher",
            "teacher": name,
            "replicate": r,
            "temperature": math.nan,
            "depth": population.config.teacher_depth,
            "start": math.nan,
        }
        for name, r in population.teachers.instances
    ]
    students = [
        {
            "network": "student",
            "teacher": population.teachers.instances[s.instance][0],
            "replicate": population.teachers.instances[s.instance][1],
            "temperature": temperatures[s.temperature_index],
            "depth": s.depth,
            "start": s.start,
        }
        for s in population.specs
    ]
    return teachers + students


def hidden_state_stacks(population: Population, inputs: torch.Tensor) -> list[torch.Tensor]:
    """(layers + 1, samples, width) for every network of `network_keys` order."""
    teacher_states = torch.stack(population.teachers.hidden_states(inputs))  # (L+1, instances, samples, width)
    students = population.students.hidden_states(rmsnorm(inputs)[population.student_instances])
    return list(teacher_states.unbind(1)) + students


def layer_removal(population: Population, repeats: int = 3, seed: int = 0) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Test loss of every student with one layer removed (each layer in turn), and with k random
    middle layers removed (k = 1 … the middle's size, `repeats` draws each)."""
    keys = network_keys(population)[len(population.teachers.instances) :]
    intact = population.test_losses().numpy()
    depths = [s.depth for s in population.specs]

    def measure(removed: dict[int, list[int]]) -> np.ndarray:
        with population.students.without_layers(removed):
            return population.test_losses().numpy()

    one = []
    for layer in range(max(depths)):
        losses = measure({m: [layer] for m, d in enumerate(depths) if d > layer})
        one += [
            {
                **keys[m],
                "layer": layer,
                "relative_layer": (layer + 0.5) / d,
                "middle": layer in middle_layers(d),
                "loss": losses[m],
                "relative_increase": losses[m] / intact[m] - 1,
            }
            for m, d in enumerate(depths)
            if d > layer
        ]
    rng = np.random.default_rng(seed)
    random = []
    for k in range(1, max(len(middle_layers(d)) for d in depths) + 1):
        chosen = [
            {
                m: rng.choice(middle_layers(d), k, replace=False).tolist()
                for m, d in enumerate(depths)
                if len(middle_layers(d)) >= k
            }
            for _ in range(repeats)
        ]
        losses = np.mean([measure(draw) for draw in chosen], axis=0)
        random += [
            {**keys[m], "removed": k, "loss": losses[m], "relative_increase": losses[m] / intact[m] - 1}
            for m in chosen[0]
        ]
    return pd.DataFrame(one), pd.DataFrame(random)


def diagnose_run(path, samples: int = 1024, progress: bool = False) -> dict[str, pd.DataFrame]:
    """All diagnostics of a run's teachers and trained students, as tidy tables:
    `layers` (per network and layer), `networks` (one summary row per network), `drop_one`,
    `drop_random` (layer removal, students) and `angular_distance` (replicate 0 of each teacher
    and of its deepest students). `progress`: a bar per phase on stderr."""
    folder = RunFolder.open(path)
    phases = tqdm(total=3, desc="hidden states", unit="phase", disable=not progress, leave=False)
    with torch.no_grad():
        population = load_trained(folder)
        inputs = population.test_inputs[:, :samples]
        stacks = hidden_state_stacks(population, inputs)
        phases.update()
        phases.set_description("layer removal")
        drop_one, drop_random = layer_removal(population)
        phases.update()
        phases.set_description("each network's profile")
    layers, networks, distances = [], [], []
    deepest = max(population.config.depths)
    for keys, states in zip(network_keys(population), stacks):
        profile = layer_profile(states).assign(**keys)
        profile["relative_layer"] = profile.layer / keys["depth"]
        layers.append(profile)
        inner = middle(keys["depth"])
        groups = trajectory_groups(states)
        networks.append(
            {
                **keys,
                "middle_rotation": profile.rotation[:-1][inner].mean(),
                "middle_update_angle": profile.update_angle[:-2][middle(keys["depth"] - 1)].mean(),
                "effective_layers": effective_layers(states),
                "end_to_end_angle": float(angle(states[0], states[-1]).mean()),
                "main_group_share": groups.share[0],
                "main_group_centre": groups.rotation_centre[0],
            }
        )
        if keys["replicate"] == 0 and keys["depth"] in (deepest, population.config.teacher_depth):
            matrix = angular_distance(states)
            i, j = np.indices(matrix.shape)
            distances.append(
                pd.DataFrame({**keys, "from_layer": i.ravel(), "to_layer": j.ravel(), "distance": matrix.ravel()})
            )
    phases.update()
    phases.close()
    networks = pd.DataFrame(networks)
    middle_drop = drop_one[drop_one.middle].groupby(SLOT, dropna=False).relative_increase.mean()
    networks = networks.merge(
        middle_drop.rename("middle_drop_increase").reset_index().assign(network="student"),
        on=["network", *SLOT],
        how="left",
    )
    return {
        "layers": pd.concat(layers, ignore_index=True),
        "networks": networks,
        "drop_one": drop_one,
        "drop_random": drop_random,
        "angular_distance": pd.concat(distances, ignore_index=True),
    }


def diagnostics_summary(networks: pd.DataFrame) -> pd.DataFrame:
    """Per (network, teacher, depth), averaged over replicates and temperatures."""
    columns = [
        "middle_rotation",
        "middle_update_angle",
        "end_to_end_angle",
        "effective_layers",
        "middle_drop_increase",
        "main_group_share",
    ]
    return networks.groupby(["network", "teacher", "depth"], sort=True)[columns].mean().reset_index()
