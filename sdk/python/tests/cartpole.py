"""Cart-pole in pure Python (no third-party packages): the classic control
task with Gymnasium's CartPole-v1 dynamics, for the tests of aep.envserver
and the external-environment protocol (docs/env.md). The Go tests of
capabilities/env serve this same file.

Its spaces are small classes named like gymnasium's, with the attributes
aep.envserver reads: the adapter needs no gymnasium.
"""

import math
import random


class Discrete:
    def __init__(self, n):
        self.n, self.start = n, 0

    def contains(self, x):
        return isinstance(x, int) and not isinstance(x, bool) and 0 <= x < self.n


class Box:
    def __init__(self, low, high, shape):
        self.low, self.high, self.shape, self.dtype = low, high, shape, "float64"

    def contains(self, x):
        return isinstance(x, list) and len(x) == self.shape[0]


class CartPole:
    """Balance a pole on a cart: push left (0) or right (1)."""

    metadata = {"render_modes": ["ansi"]}
    gravity, masscart, masspole, length, force_mag, tau = 9.8, 1.0, 0.1, 0.5, 10.0, 0.02
    theta_limit = 12 * 2 * math.pi / 360
    x_limit = 2.4

    def __init__(self, max_steps=500):
        self.max_steps = max_steps
        self.action_space = Discrete(2)
        self.observation_space = Box(-math.inf, math.inf, (4,))
        self.rng = random.Random()
        self.state = None
        self.steps = 0

    def reset(self, seed=None, options=None):
        if seed is not None:
            self.rng = random.Random(seed)
        self.state = [self.rng.uniform(-0.05, 0.05) for _ in range(4)]
        self.steps = 0
        return list(self.state), {"seeded": seed is not None}

    def step(self, action):
        x, x_dot, theta, theta_dot = self.state
        force = self.force_mag if action == 1 else -self.force_mag
        total_mass = self.masspole + self.masscart
        polemass_length = self.masspole * self.length
        cos, sin = math.cos(theta), math.sin(theta)
        temp = (force + polemass_length * theta_dot ** 2 * sin) / total_mass
        theta_acc = (self.gravity * sin - cos * temp) / (
            self.length * (4.0 / 3.0 - self.masspole * cos ** 2 / total_mass))
        x_acc = temp - polemass_length * theta_acc * cos / total_mass
        x += self.tau * x_dot
        x_dot += self.tau * x_acc
        theta += self.tau * theta_dot
        theta_dot += self.tau * theta_acc
        self.state = [x, x_dot, theta, theta_dot]
        self.steps += 1
        terminated = abs(x) > self.x_limit or abs(theta) > self.theta_limit
        truncated = not terminated and self.steps >= self.max_steps
        return list(self.state), 1.0, terminated, truncated, {"steps": self.steps}

    def render(self):
        x, _, theta, _ = self.state
        return f"cart at {x:+.3f}, pole at {math.degrees(theta):+.2f} degrees, step {self.steps}"

    def close(self):
        pass

    def get_state(self):
        """For session snapshots (aep.envserver): the physics, the step
        count and the random state, as JSON values."""
        version, internal, gauss = self.rng.getstate()
        return {"state": self.state, "steps": self.steps, "rng": [version, list(internal), gauss]}

    def set_state(self, value):
        version, internal, gauss = value["rng"]
        self.rng.setstate((version, tuple(internal), gauss))
        self.state, self.steps = value["state"], value["steps"]


def policy(obs):
    """A fixed policy for the tests: push towards the pole's lean."""
    return 1 if obs[2] + 0.5 * obs[3] > 0 else 0


def trajectory(env, seed, steps=60):
    """(observation, reward, terminated, truncated) per step under policy."""
    obs, _ = env.reset(seed=seed)
    out = [(obs, 0.0, False, False)]
    for _ in range(steps):
        obs, reward, terminated, truncated, _ = env.step(policy(obs))
        out.append((obs, reward, terminated, truncated))
        if terminated or truncated:
            break
    return out
