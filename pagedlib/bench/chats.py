"""Real chats for the real model (``pagedlib.models.smollm2``): one system prompt shared by every chat, and
many users' questions. Chapters 7, 10 and 11 serve them; ``python -m pagedlib.bench engine --against
transformers --model smollm2`` races them through pagedlib and transformers.

:data:`SYSTEM` is a one-line system prompt; :data:`LONG_SYSTEM` a help desk's few hundred tokens of
instructions, the kind of shared prefix a deployed assistant sends with every request, where a prefix
cache saves most of the prefill.
"""
from __future__ import annotations

SYSTEM = "You are a friendly assistant. Answer in two or three short sentences, in plain words."

LONG_SYSTEM = (
    "You are the help desk assistant of a small public library in a university town. You answer "
    "questions from visitors of every age, by chat, one question at a time. Follow these rules. "
    "Be friendly and brief: two or three sentences are enough for most answers, and never more than "
    "five. Use plain words; explain any technical term you cannot avoid. The library opens at nine "
    "in the morning and closes at eight in the evening on weekdays; on Saturdays it opens at ten and "
    "closes at four; it is closed on Sundays and public holidays. Members may borrow up to twelve "
    "items at a time for three weeks, and renew them twice online or at the front desk, unless "
    "another member has reserved them. Membership is free for anyone who lives, works or studies in "
    "the town; bring a document with your address. Late returns cost ten cents a day per item, and "
    "never more than five dollars per item. The library has forty public computers, free wireless "
    "internet, printers and a scanner, six quiet study rooms that can be booked for two hours a day, "
    "a children's corner with story time on Wednesday mornings, and a makerspace with a 3D printer "
    "that members can book after a short safety course. If a visitor asks for medical, legal or "
    "financial advice, say kindly that you cannot give it and suggest a reliable public source or a "
    "professional. If you do not know an answer, say so and suggest asking a librarian at the front "
    "desk. Never invent facts about the library that these rules do not state. Do not ask for "
    "personal information. When a question is about books in general, such as a recommendation, "
    "answer from general knowledge and mention that the catalogue shows what the library holds.")

QUESTIONS = [
    "What is the capital of France?",
    "Why is the sky blue?",
    "How do I boil an egg?",
    "What is a black hole?",
    "Can you suggest a good book for a rainy day?",
    "How many legs does a spider have?",
    "What is the difference between weather and climate?",
    "How do plants make their food?",
    "What does a computer's memory do?",
    "Why do we have seasons?",
    "What is the tallest mountain in the world?",
    "How can I learn to cook?",
    "What is a prime number?",
    "Why do cats purr?",
    "How does a rainbow form?",
    "What should I read to learn about history?",
    "How far away is the Moon?",
    "What is photosynthesis?",
    "How do I write a good letter?",
    "What is the largest ocean?",
    "Why do leaves change colour in autumn?",
    "What is gravity?",
    "How do bees make honey?",
    "What is a noun?",
    "How can I sleep better?",
    "What causes thunder?",
    "Who wrote Romeo and Juliet?",
    "How does a bicycle stay upright?",
    "What is the speed of light?",
    "Why is the ocean salty?",
    "How do I start a vegetable garden?",
    "What is an atom?",
]


def chat(question: str, system: str = SYSTEM) -> list[dict]:
    """One user's chat: the shared system prompt, then the question."""
    return [{"role": "system", "content": system}, {"role": "user", "content": question}]


def questions(n: int) -> list[str]:
    """``n`` questions: :data:`QUESTIONS` in order, repeated with a number when ``n`` is larger
    (so that every chat's prompt differs)."""
    return [QUESTIONS[i % len(QUESTIONS)] + ("" if i < len(QUESTIONS) else f" (question {i + 1})")
            for i in range(n)]
