"""Writes benchmarks/evalsets/support/: an eval set shaped like a user's own (a support desk's),
for the adaptive-vs-grid benchmark. Four tasks, 320 items, from fixed templates and a fixed seed:

- intent (120, multiple choice of 6 teams): which team a customer message goes to;
- order_id (80, generate, exact match): copy the order number out of a message;
- refund (60, generate, numeric): the refund owed (unit price x quantity, minus a discount);
- return_policy (60, multiple choice yes/no): does a stated return policy allow what the customer asks?

    python benchmarks/evalsets/make_support.py      # rewrites the folder; same seed, same files
"""

from __future__ import annotations

import json
import random
from pathlib import Path

OUT = Path(__file__).resolve().parent / "support"
SEED = 2026

INTENTS = {
    "billing": ["I was charged twice for {item}.", "My card was billed {amount} but I expected less.",
                "Can you send me an invoice for {item}?", "Why is there a {amount} fee on my statement?",
                "The discount code was not applied to my {item} order."],
    "shipping": ["My {item} has not arrived yet.", "Tracking for the {item} has not moved in {days} days.",
                 "Can you deliver the {item} to my office instead?", "The courier left my {item} at the wrong door.",
                 "How long does shipping to {city} take?"],
    "returns": ["The {item} is too small, I want to send it back.", "How do I print a return label for the {item}?",
                "The {item} arrived broken and I would like to return it.",
                "I changed my mind about the {item}, can I return it?", "Where do I drop off a return in {city}?"],
    "account": ["I cannot log in to my account.", "Please change the email on my account to a new one.",
                "How do I reset my password?", "Delete my account and all my data, please.",
                "My account says it is locked after {days} tries."],
    "technical": ["The {item} will not turn on after charging.", "The app crashes when I open my orders.",
                  "The {item} keeps disconnecting from wifi.", "The firmware update for the {item} failed.",
                  "The {item} screen flickers every few seconds."],
    "other": ["Do you have a store in {city}?", "Are you hiring in {city}?", "Who designed the {item}?",
              "Can I visit your warehouse?", "Do you sponsor local sports teams in {city}?"],
}
ITEMS = ["headphones", "kettle", "jacket", "lamp", "blender", "backpack", "monitor", "sneakers", "desk chair", "tent"]
PLURAL = {"headphones": "pairs of headphones", "sneakers": "pairs of sneakers"}  # else add an s
SINGULAR = {"headphones": "a pair of headphones", "sneakers": "a pair of sneakers"}  # else "a ..."
CITIES = ["Leeds", "Porto", "Lyon", "Graz", "Tampere", "Gdansk", "Utrecht", "Bilbao"]


def _intent(rng: random.Random, n: int) -> list[dict]:  # type: ignore[type-arg]
    rows, names = [], list(INTENTS)
    for i in range(n):
        team = names[i % len(names)]
        text = rng.choice(INTENTS[team]).format(item=rng.choice(ITEMS), city=rng.choice(CITIES),
                                                amount=f"{rng.randint(5, 90)} EUR", days=rng.randint(2, 9))
        rows.append({"text": text, "team": team})
    rng.shuffle(rows)
    return rows


def _order_id(rng: random.Random, n: int) -> list[dict]:  # type: ignore[type-arg]
    forms = ["Hi, my order {oid} still shows as processing.", "Order {oid}: the {item} is missing a part.",
             "I need to change the address on {oid} before it ships.", "Re: {oid} - please cancel it, thanks.",
             "The {item} from order number {oid} came in the wrong colour.",
             "Could you check {oid}? I was told it left {city} on Monday."]
    rows = []
    for _ in range(n):
        oid = f"{rng.choice('ABCDEFGHJKLMNPQRSTUVWXYZ')}{rng.choice('ABCDEFGHJKLMNPQRSTUVWXYZ')}-{rng.randint(10000, 99999)}"
        rows.append({"text": rng.choice(forms).format(oid=oid, item=rng.choice(ITEMS), city=rng.choice(CITIES)),
                     "order_id": oid})
    return rows


def _refund(rng: random.Random, n: int) -> list[dict]:  # type: ignore[type-arg]
    rows = []
    for _ in range(n):
        price, qty, off = rng.randint(4, 60), rng.randint(1, 5), rng.choice([0, 0, 5, 10])
        item = rng.choice(ITEMS)
        things = PLURAL.get(item, item + "s") if qty > 1 else SINGULAR.get(item, item).removeprefix("a ")
        question = (f"A customer returns {qty} {things} bought at {price} euros each"
                    + (f" and keeps a {off} euro restocking fee" if off else "") + ". How many euros are refunded?")
        rows.append({"question": question, "answer": str(price * qty - off)})
    return rows


def _policy(rng: random.Random, n: int) -> list[dict]:  # type: ignore[type-arg]
    rows = []
    for _ in range(n):
        window, days = rng.choice([14, 30, 60]), rng.randint(3, 90)
        opened_ok = rng.random() < 0.5
        opened = rng.random() < 0.5
        allowed = days <= window and (opened_ok or not opened)
        policy = f"Items can be returned within {window} days" + ("." if opened_ok else ", unopened only.")
        item = rng.choice(ITEMS)
        ask = f"I bought {SINGULAR.get(item, 'a ' + item)} {days} days ago" + (" and opened it" if opened else ", still sealed")
        rows.append({"policy": policy, "request": ask + ". Can I return it?", "answer": "yes" if allowed else "no"})
    return rows


TASKS = {
    "intent": ("""description: Which team should handle a customer's message
type: multiple_choice
data: intent.jsonl
prompt:
  chat: |-
    Message: {{ text }}
    Which team should handle it: billing, shipping, returns, account, technical or other? Answer with one word.
  plain: |-
    Message: {{ text }}
    Team:
target: "{{ team }}"
choices: [billing, shipping, returns, account, technical, other]
fewshot: {n: 3, data: intent_fewshot.jsonl}
metric: choice_accuracy
""", _intent, 120),
    "order_id": ("""description: Copy the order number out of a customer's message, exactly as written
type: generate
data: order_id.jsonl
prompt:
  chat: |-
    Message: {{ text }}
    What is the order number? Reply with the order number only.
  plain: |-
    Message: {{ text }}
    Order number:
target: "{{ order_id }}"
fewshot: {n: 3, data: order_id_fewshot.jsonl}
stop:
  chat: ["\\n\\n"]
  plain: ["\\n"]
max_new_tokens: 12
metric: exact_match
metric_args: {strip: true, strip_punctuation: true, first_line: true}
""", _order_id, 80),
    "refund": ("""description: The refund owed for a return (unit price x quantity, minus a fee), as a number
type: generate
data: refund.jsonl
prompt:
  chat: |-
    {{ question }}
    Reply with only the number.
  plain: |-
    Question: {{ question }}
    Answer:
target: "{{ answer }}"
fewshot: {n: 3, data: refund_fewshot.jsonl}
stop: ["\\n"]
max_new_tokens: 8
metric: numeric
metric_args: {which: last}
""", _refund, 60),
    "return_policy": ("""description: Does the stated return policy allow what the customer asks? (yes / no)
type: multiple_choice
data: return_policy.jsonl
prompt:
  chat: |-
    Policy: {{ policy }}
    Customer: {{ request }}
    Is the return allowed? Answer yes or no.
  plain: |-
    Policy: {{ policy }}
    Customer: {{ request }}
    Allowed:
target: "{{ answer }}"
choices: ["yes", "no"]
fewshot: {n: 3, data: return_policy_fewshot.jsonl}
metric: choice_accuracy
""", _policy, 60),
}
POLICY = """# Floors a support team might set: routing and order numbers must be right, refunds mostly.
floors:
  intent: 0.80
  order_id: 0.70
  refund: 0.50
  return_policy: 0.70
"""


def main() -> None:
    rng = random.Random(SEED)
    OUT.mkdir(parents=True, exist_ok=True)
    for name, (spec, make, n) in TASKS.items():
        rows = make(rng, n + 3)
        items = [{"id": f"{name}-{i + 1:03d}", **row} for i, row in enumerate(rows[:n])]
        shots = [{"id": f"{name}-shot-{i + 1}", **row} for i, row in enumerate(rows[n:])]
        (OUT / f"{name}.yaml").write_text(spec)
        (OUT / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in items))
        (OUT / f"{name}_fewshot.jsonl").write_text("".join(json.dumps(r) + "\n" for r in shots))
    (OUT / "policy.yaml").write_text(POLICY)


if __name__ == "__main__":
    main()
