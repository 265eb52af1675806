"""One training step of PyTorch (nanoGPT's model, torch.optim.AdamW, clip_grad_norm_) from a ddp-train
shakespeare-char checkpoint at step s, on the batch ddp-train trained at step s + 1 (world 1, its windows and sampler
order for --seed SEED), against ddp-train's own checkpoint at step s + 1: how far apart the two updates land, as a
fraction of the update (docs/benchmarks.md, "Where world 1 ends").

  one_step.py DATA_DIR CHECKPOINT_DIR SEED STEPS       # STEPS: 1,2,50 (checkpoints of a --checkpoint-every 1 run)
"""
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import nanogpt as ng  # noqa: E402


def main():
    data_dir, ckdir, seed, steps = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    torch.set_num_threads(2)
    vocab, train, _ = ng.load_text(data_dir)
    B, T, count = 12, 64, 2000 * 12
    offsets = torch.randint(len(train) - T, (count, 1), generator=torch.Generator().manual_seed(seed))
    windows = train[offsets + torch.arange(T + 1)]
    order = torch.randperm(count, generator=torch.Generator().manual_seed(seed))

    def checkpoint(s):
        names = [f for f in os.listdir(ckdir) if f.endswith("-s%08d.pt" % s)]
        return torch.load(os.path.join(ckdir, names[0]))

    for s in (int(x) for x in steps.split(",")):
        before, after = checkpoint(s), checkpoint(s + 1)
        model = ng.GPT(ng.Config(vocab_size=len(vocab)))
        model.load_state_dict(before["model"])
        decay = [q for q in model.parameters() if q.dim() >= 2]
        no_decay = [q for q in model.parameters() if q.dim() < 2]
        opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                                lr=1e-3, betas=(0.9, 0.99))
        opt.load_state_dict(before["optimizer"])
        for g in opt.param_groups:  # the rate ddp-train used for this step
            g["lr"] = after["optimizer"]["param_groups"][0]["lr"]
        rows = windows[order[s * B:(s + 1) * B]]
        _, loss = model(rows[:, :T].contiguous(), rows[:, 1:].contiguous())
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        worst, where = 0.0, ""
        for name, q in model.named_parameters():
            update = (after["model"][name] - before["model"][name]).abs().max().item()
            gap = (q.detach() - after["model"][name]).abs().max().item() / max(update, 1e-30)
            if gap > worst:
                worst, where = gap, name
        print(json.dumps({"step": s + 1, "loss": round(loss.item(), 5), "grad_norm": round(norm.item(), 4),
                          "gap_over_update": worst, "where": where}))


if __name__ == "__main__":
    main()
