"""The fixed text that tiny tokenizers are trained on.

Written for this project (no downloaded data): questions, options, answers and reasoning in the shapes
that ReelRL prompts and responses take, plus digits, punctuation and a little code, so that common
words become single tokens and the byte-level fallback covers everything else. Changing this text
changes every tiny tokenizer (and so every tiny checkpoint): treat it as frozen.
"""

from __future__ import annotations

PASSAGES = (
    "What is happening in the video? Watch the clip carefully and answer the question.",
    "Question: What color is the car that enters the scene from the left? Options: A. red B. blue "
    "C. green D. white. Answer with the option's letter from the given choices directly.",
    "<think>The person picks up the cup, walks to the table and puts it down. Then the person sits "
    "on the chair and opens a book.</think><answer>B</answer>",
    "How many people are standing near the door at the end of the video? Please give a number.",
    "<think>At the beginning there are two people; one more arrives after five seconds, so three "
    "people stand near the door at the end.</think><answer>3</answer>",
    "When does the dog jump over the fence? Give the start and end time in seconds.",
    '<answer>{"time": [12.5, 17.0]}</answer> The dog jumps between 12.5 and 17.0 seconds.',
    "Where is the ball in the frame? Give the bounding box as [x1, y1, x2, y2] in pixels.",
    '<answer>{"boxes": [104, 56, 220, 180]}</answer>',
    "Is the man wearing a hat? Answer yes or no. <answer>yes</answer> <answer>no</answer>",
    "Describe the video in one sentence. A woman is cooking dinner in a small kitchen while "
    "a child draws pictures at the table next to the window.",
    "Read the text that appears on the sign. The sign says: OPEN EVERY DAY FROM 9 AM TO 5 PM.",
    "Solve the problem shown on the board. If x + 7 = 12, then x = 5. The area of a circle with "
    "radius 3 is 9 pi, about 28.27 square units. The answer is 42.",
    "First, the camera shows a city street at night. Next, it moves to a park in the morning. "
    "Finally, it ends on a beach at sunset where children are playing with a red kite.",
    "The video shows a basketball game. The player in the white shirt scores two points, "
    "then the team in black runs back to defend. The score changes from 10 to 12.",
    "Which action happens first? A. opening the door B. turning on the light C. closing the "
    "window D. sitting down. The correct option is A because the door opens before anything else.",
    "Track the object across the frames and report its position at each second.",
    "Let me think step by step. The red block is on the left, the blue block is on the right, "
    "and the green block is between them, so the order from left to right is red, green, blue.",
    "The temperature rose from 18 degrees to 25 degrees over 6 hours, an increase of 7 degrees.",
    "def reward(response: str) -> float:\n    return 1.0 if response.strip() == answer else 0.0\n",
    '<svg width="100" height="100"><circle cx="50" cy="50" r="40" fill="blue"/></svg>',
    "0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 20 24 30 32 48 50 60 64 90 100 120 128 256 512 1000",
    "first second third fourth fifth left right top bottom up down before after during while until",
    "man woman child children person people dog cat bird horse ball car bus bike tree house road "
    "water river sea sky sun moon light dark day night morning evening rain snow wind fire",
    "walk run jump sit stand open close pick put take give hold throw catch push pull cut cook "
    "eat drink play read write draw sing dance talk look watch turn move stop start begin end",
    "red orange yellow green blue purple pink brown black white gray big small long short tall "
    "fast slow hot cold new old happy sad many few more less most least same different",
    "the a an and or but not no yes is are was were be been has have had do does did will would "
    "can could should may might must of in on at to from by with for about into over under between",
    "what which who whom whose where when why how this that these those there here it its they "
    "them their he him his she her we us our you your I me my",
)


def training_corpus() -> list[str]:
    """The passages, in a fixed order (BPE training is deterministic given its input)."""
    return list(PASSAGES)
