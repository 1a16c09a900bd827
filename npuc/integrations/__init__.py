"""npuc inside other PyTorch tools: ``torch.compile(model, backend="npuc")`` (:mod:`.dynamo`)
and an ExecuTorch partitioner and backend (:mod:`.executorch`).  See docs/integrations.md."""
