"""The task's functions for lmms-eval: each JSONL doc carries the video's absolute path and the user
prompt ReelRL's ``lvbench`` adapter writes for it, so both pipelines ask the same words; the answer
is read by lmms-eval's own LVBench scorer."""

from lmms_eval.tasks.lvbench.utils import lvbench_process_results


def doc_to_visual(doc):
    return [doc["video"]]


def doc_to_text(doc, lmms_eval_specific_kwargs=None):
    return doc["prompt"]


def doc_to_messages(doc, lmms_eval_specific_kwargs=None):
    # the video before the question, as ReelRL's chat turns put it
    content = [{"type": "video", "url": doc["video"]}, {"type": "text", "text": doc["prompt"]}]
    return [{"role": "user", "content": content}]


def process_results(doc, results):
    return lvbench_process_results(doc, results)
