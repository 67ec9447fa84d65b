"""`TokenEmbeddingExtractor`: embeds token-id observations and mean-pools them under the mask."""

from __future__ import annotations

import gymnasium as gym
import torch
from stable_baselines3.common.torch_layers import BaseFeaturesExtractor
from torch import nn

from opd_gym.errors import ConfigError


class TokenEmbeddingExtractor(BaseFeaturesExtractor):
    """Features for `TokenIdObservation`'s Dict space: per `<name>_ids`/`<name>_mask` pair, a
    shared embedding mean-pooled over the unmasked positions; other Box keys are flattened
    and concatenated. Use with `policy_kwargs={"features_extractor_class": ...}`.
    """

    def __init__(self, observation_space: gym.spaces.Dict, embed_dim: int = 32) -> None:
        if not isinstance(observation_space, gym.spaces.Dict):
            raise TypeError("TokenEmbeddingExtractor needs a Dict observation space")
        space = observation_space.spaces
        pairs = [(key, key[: -len("_ids")] + "_mask") for key in space if key.endswith("_ids")]
        pairs = [(ids, mask) for ids, mask in pairs if mask in space]
        if not pairs:
            raise ConfigError("no '<name>_ids' key with a matching '<name>_mask' key")
        paired = {key for pair in pairs for key in pair}
        others = [key for key in space if key not in paired]
        other_dim = sum(int(gym.spaces.flatdim(space[key])) for key in others)
        super().__init__(observation_space, features_dim=embed_dim * len(pairs) + other_dim)
        vocab = max(int(space[ids].high.max()) + 1 for ids, _ in pairs)
        self.pairs, self.others = pairs, others
        self.embedding = nn.Embedding(vocab, embed_dim)

    def forward(self, observations: dict[str, torch.Tensor]) -> torch.Tensor:
        """Masked mean of the token embeddings per pair, then the other keys, concatenated."""
        parts = []
        for ids_key, mask_key in self.pairs:
            ids = observations[ids_key].long()
            mask = observations[mask_key].float().unsqueeze(-1)
            summed = (self.embedding(ids) * mask).sum(dim=1)
            parts.append(summed / mask.sum(dim=1).clamp(min=1.0))
        parts.extend(observations[key].float().flatten(1) for key in self.others)
        return torch.cat(parts, dim=1)
