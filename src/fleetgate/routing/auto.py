"""`model: "auto"`: a small rule-based scorer picks a tier; heartbeats go to `simple`.

The rules, in order (docs/virtual-models.md states them for operators):

1. A heartbeat (see `is_heartbeat`) goes to the simple tier; it neither reads nor
   changes the conversation's tier.
2. The first keyword rule with a keyword in the last user message picks its tier.
3. Otherwise the score is the sum of: `tools` (tools or functions present),
   `json_schema` (response_format json_schema), `images` (an image part),
   `reasoning_<effort>` (reasoning effort low/medium/high), and one point per
   `words_per_point` prompt words. score >= reasoning_at → reasoning tier;
   score >= default_at → default tier; else the simple tier.
4. A picked tier that is not configured becomes the default tier.
5. Stickiness: with a conversation key (the stickiness header, else `user`), a
   conversation keeps its remembered tier unless the new pick ranks higher
   (simple < default < reasoning; other tiers rank as default), so it moves up, never down.
"""

from __future__ import annotations

from typing import Any

from fleetgate.config.schema import AutoConfig, HeartbeatConfig
from fleetgate.ingress.profile import RequestProfile
from fleetgate.routing import signals
from fleetgate.routing.plan import PlanContext
from fleetgate.routing.sticky import conversation_hash

AUTO_MODEL = "auto"
DEFAULT_HEARTBEAT = HeartbeatConfig()


def is_heartbeat(profile: RequestProfile, cfg: HeartbeatConfig) -> bool:
    """A health check: a tiny output budget, stated, and a prompt of at most a few words."""
    if not cfg.enabled or profile.output_reserve is None:
        return False
    if profile.output_reserve > cfg.max_output_tokens:
        return False
    return signals.prompt_words(profile.body, cfg.max_prompt_words) <= cfg.max_prompt_words


def score(body: dict[str, Any], cfg: AutoConfig) -> tuple[int, list[str]]:
    """The request's score and the signals that added to it (names only)."""
    w = cfg.weights
    points = 0
    hits: list[str] = []
    for name, present, weight in (
        ("tools", signals.has_tools(body), w.tools),
        ("json_schema", signals.has_json_schema(body), w.json_schema),
        ("images", signals.has_images(body), w.images),
    ):
        if present and weight:
            points += weight
            hits.append(name)
    effort = signals.reasoning_effort(body)
    effort_weight = {
        "low": w.reasoning_low,
        "medium": w.reasoning_medium,
        "high": w.reasoning_high,
    }.get(effort or "", 0)
    if effort_weight:
        points += effort_weight
        hits.append(f"reasoning_{effort}")
    size = signals.prompt_words(body) // w.words_per_point
    if size:
        points += size
        hits.append(f"size+{size}")
    return points, hits


def _keyword_tier(body: dict[str, Any], cfg: AutoConfig) -> tuple[str, int] | None:
    if not cfg.keywords:
        return None
    text = signals.last_user_text(body).lower()
    for i, rule in enumerate(cfg.keywords):
        if any(k.lower() in text for k in rule.keywords):
            return rule.tier, i
    return None


def _rank(tier: str, cfg: AutoConfig) -> int:
    return {cfg.simple_tier: 0, cfg.default_tier: 1, cfg.reasoning_tier: 2}.get(tier, 1)


def conversation_key(profile: RequestProfile, cfg: AutoConfig) -> str | None:
    key = profile.headers.get(cfg.stickiness.header.lower())
    if not key and cfg.stickiness.use_user_field:
        user = profile.body.get("user")
        key = f"user:{user}" if isinstance(user, str) and user else None
    return conversation_hash(key) if key else None


def pick_tier(ctx: PlanContext, cfg: AutoConfig, heartbeat: bool) -> tuple[str, dict[str, Any]]:
    """The tier for an `auto` request, and how it was chosen (for explain and the log)."""
    tiers = ctx.fleet.tiers

    def configured(name: str) -> str:
        return name if name in tiers else cfg.default_tier

    if heartbeat:
        return configured(cfg.simple_tier), {"heartbeat": True}
    body = ctx.profile.body
    detail: dict[str, Any] = {"heartbeat": False}
    keyword = _keyword_tier(body, cfg)
    if keyword is not None:
        picked, detail["keyword_rule"] = keyword
    else:
        points, hits = score(body, cfg)
        detail.update(score=points, signals=hits)
        if points >= cfg.reasoning_at:
            picked = cfg.reasoning_tier
        elif points >= cfg.default_at:
            picked = cfg.default_tier
        else:
            picked = cfg.simple_tier
    picked = configured(picked)
    key = conversation_key(ctx.profile, cfg)
    if key is not None and ctx.sticky is not None:
        remembered = ctx.sticky.get(key, ctx.now)
        if remembered in tiers and _rank(remembered, cfg) >= _rank(picked, cfg):
            detail["sticky"] = remembered != picked
            picked = remembered
        else:
            detail["sticky"] = False
        ctx.sticky.put(key, picked, ctx.now)
    return picked, detail
