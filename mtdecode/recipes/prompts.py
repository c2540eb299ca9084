# ruff: noqa: E501 (code snippets, one per line)
"""Chat prompts for distilling the SmolLM2 draft: task templates crossed with topics.

The training topics and the held-out topics do not overlap, so agreement measured on
`held_out_prompts()` is agreement on chat prompts the draft never saw.
"""

TASKS = [
    "Explain {t} to a ten-year-old.",
    "Write a short poem about {t}.",
    "What are three common misconceptions about {t}?",
    "Give me a step-by-step guide to getting started with {t}.",
    "Summarize the history of {t} in one paragraph.",
    "What are the pros and cons of {t}?",
    "Write a short email to a friend recommending {t}.",
    "List five interesting facts about {t}.",
    "How would you teach {t} in a one-hour class?",
    "Write a short dialogue between two people discussing {t}.",
    "What questions should I ask an expert in {t}?",
    "Describe {t} in three sentences.",
]

TOPICS = [
    "photosynthesis",
    "the French Revolution",
    "machine learning",
    "gardening",
    "black holes",
    "the stock market",
    "climate change",
    "meditation",
    "the Roman Empire",
    "vaccines",
    "electric cars",
    "coffee brewing",
    "the water cycle",
    "chess openings",
    "jazz music",
    "recycling",
    "the human heart",
    "volcanoes",
    "cloud computing",
    "healthy sleep",
    "the Renaissance",
    "honey bees",
    "solar panels",
    "learning a language",
    "marathon training",
    "the internet",
    "DNA",
    "public speaking",
    "budgeting",
    "the moon landing",
    "baking bread",
    "earthquakes",
    "democracy",
    "video game design",
    "rainforests",
    "the printing press",
    "quantum computing",
    "bird migration",
    "time management",
    "origami",
    "the Olympic Games",
    "nuclear energy",
    "painting with watercolors",
    "the immune system",
    "cryptography",
    "ancient Egypt",
    "ocean tides",
    "writing a novel",
    "dinosaurs",
    "renewable energy",
    "Python programming",
    "sorting algorithms",
    "databases",
    "the theory of evolution",
    "plate tectonics",
    "Shakespeare",
    "mobile phones",
    "first aid",
    "the solar system",
    "camping",
    "nutrition",
    "robots",
    "the Great Wall of China",
    "photography",
    "yoga",
    "inflation",
    "the periodic table",
    "social media",
    "coral reefs",
    "knitting",
    "the Industrial Revolution",
    "artificial intelligence ethics",
    "wind turbines",
    "job interviews",
    "mushrooms",
    "the Silk Road",
    "linear algebra",
    "composting",
    "hiking safety",
    "3D printing",
]

HELD_OUT_TOPICS = [
    "glaciers",
    "the Byzantine Empire",
    "beekeeping laws",
    "submarines",
    "opera",
    "tea ceremonies",
    "rock climbing",
    "the Cold War",
    "spreadsheets",
    "urban planning",
    "penguins",
    "probability",
    "the violin",
    "desert ecosystems",
    "typography",
    "the Apollo program",
    "home insulation",
    "fermentation",
    "lighthouses",
    "board games",
]


def training_prompts() -> list[str]:
    return [task.format(t=topic) for topic in TOPICS for task in TASKS]


def held_out_prompts() -> list[str]:
    return [task.format(t=topic) for topic in HELD_OUT_TOPICS for task in TASKS]


# ------------------------------------------------------------------ code editing, math, summaries (EAGLE head)
#
# The EAGLE head (`mtdecode.zoo.eagle`) learns from the target's answers on all four benchmark task kinds. None
# of these snippets, problems or passages is in the benchmark (`tests/test_zoo.py` checks), and the held-out
# ones are disjoint from the training ones.

CODE_EDITS = [
    "Rename the function to `{new}` and show the whole code:",
    "Add type hints to this code and show all of it:",
    "Add a docstring to every function and show the whole code:",
    "Add a comment above each line that is not obvious, and show the whole code:",
    "Make this code raise a ValueError on empty input, and show the whole code:",
    "Rewrite this code in a more readable way and show all of it:",
    "Translate this Python code to JavaScript:",
    "Write two pytest tests for this code:",
]

CODE_SNIPPETS = [
    "def word_lengths(sentence):\n    lengths = {}\n    for word in sentence.split():\n        lengths[word] = len(word)\n    return lengths",
    "def celsius_to_fahrenheit(temps):\n    out = []\n    for t in temps:\n        out.append(t * 9 / 5 + 32)\n    return out",
    "def find_max(items):\n    best = items[0]\n    for item in items[1:]:\n        if item > best:\n            best = item\n    return best",
    "def count_vowels(text):\n    n = 0\n    for ch in text.lower():\n        if ch in 'aeiou':\n            n += 1\n    return n",
    "class Counter:\n    def __init__(self):\n        self.value = 0\n\n    def increment(self):\n        self.value += 1\n\n    def reset(self):\n        self.value = 0",
    "def flatten(nested):\n    flat = []\n    for sub in nested:\n        for x in sub:\n            flat.append(x)\n    return flat",
    "def read_numbers(path):\n    numbers = []\n    for line in open(path):\n        numbers.append(int(line.strip()))\n    return numbers",
    "def fizzbuzz(n):\n    for i in range(1, n + 1):\n        if i % 15 == 0:\n            print('FizzBuzz')\n        elif i % 3 == 0:\n            print('Fizz')\n        elif i % 5 == 0:\n            print('Buzz')\n        else:\n            print(i)",
    "def unique(items):\n    seen = []\n    for item in items:\n        if item not in seen:\n            seen.append(item)\n    return seen",
    "class BankAccount:\n    def __init__(self, owner, balance=0):\n        self.owner = owner\n        self.balance = balance\n\n    def deposit(self, amount):\n        self.balance += amount\n\n    def withdraw(self, amount):\n        self.balance -= amount",
    "def factorial(n):\n    result = 1\n    for i in range(2, n + 1):\n        result *= i\n    return result",
    "def group_by_length(words):\n    groups = {}\n    for w in words:\n        groups.setdefault(len(w), []).append(w)\n    return groups",
    "def reverse_words(sentence):\n    words = sentence.split(' ')\n    words.reverse()\n    return ' '.join(words)",
    "def mean_and_spread(values):\n    m = sum(values) / len(values)\n    spread = max(values) - min(values)\n    return m, spread",
    "def parse_pairs(text):\n    result = {}\n    for part in text.split(','):\n        key, value = part.split('=')\n        result[key.strip()] = value.strip()\n    return result",
    "def is_prime(n):\n    if n < 2:\n        return False\n    for d in range(2, int(n ** 0.5) + 1):\n        if n % d == 0:\n            return False\n    return True",
]

HELD_OUT_CODE_SNIPPETS = [
    "def gcd(a, b):\n    while b:\n        a, b = b, a % b\n    return a",
    "def title_case(words):\n    out = []\n    for w in words:\n        out.append(w[:1].upper() + w[1:])\n    return out",
    "class Timer:\n    def __init__(self):\n        self.laps = []\n\n    def lap(self, seconds):\n        self.laps.append(seconds)\n\n    def total(self):\n        return sum(self.laps)",
    "def running_total(values):\n    totals = []\n    acc = 0\n    for v in values:\n        acc += v\n        totals.append(acc)\n    return totals",
]

MATH_TEMPLATES = [
    "A car uses {a} litres of fuel for every 100 km. How much fuel does it need for {b} km? Show your steps.",
    "Tom reads {a} pages a day. How many days does he need to finish a book of {c} pages? Show your steps.",
    "A box holds {a} pencils. How many boxes are needed for {c} pencils? Show your steps.",
    "A jacket costs {c} dollars and is on sale for {p}% off. What is the sale price? Show your steps.",
    "The sum of two numbers is {c} and their difference is {a}. What are the numbers? Show your steps.",
    "A garden is {a} m long and {b} m wide. What are its area and its perimeter? Show your steps.",
    "Solve for x: {a}x - {b} = {c}. Show each step.",
    "A cyclist rides at {a} km/h for {h} hours. How far does she go? Show your steps.",
    "{a} friends share a bill of {c} dollars equally. How much does each pay? Show your steps.",
    "A tank holds {c} litres and fills at {a} litres per minute. How long does it take to fill? Show your steps.",
    "What is {p}% of {c}? Explain the method.",
    "A class has {c} students and {p}% of them walk to school. How many walk? Show your steps.",
]

SUMMARY_TASKS = [
    "Summarise this text in two sentences.\n\n{passage}",
    "Give the main point of this text in one sentence.\n\n{passage}",
    "List the key facts in this text as bullet points.\n\n{passage}",
    "Rewrite this text for a ten-year-old in three sentences.\n\n{passage}",
    "Write a title for this text and a one-sentence summary.\n\n{passage}",
    "What are the three most important ideas in this text?\n\n{passage}",
]


def code_prompts(held_out: bool = False) -> list[str]:
    """Code-editing prompts: every edit crossed with every snippet (training and held-out snippets differ)."""
    snippets = HELD_OUT_CODE_SNIPPETS if held_out else CODE_SNIPPETS
    edits = [e.format(new="compute") for e in CODE_EDITS]
    return [f"{edit}\n```python\n{code}\n```" for code in snippets for edit in edits]


def math_prompts(count: int, held_out: bool = False) -> list[str]:
    """`count` word problems, the templates filled with seeded random numbers (held-out uses another seed)."""
    import random

    rng = random.Random(1 if held_out else 0)
    prompts = []
    while len(prompts) < count:
        template = MATH_TEMPLATES[len(prompts) % len(MATH_TEMPLATES)]
        numbers = dict(a=rng.randint(3, 19), b=rng.randint(20, 90), c=rng.randint(100, 900),
                       p=rng.choice([10, 15, 20, 25, 30, 40]), h=rng.randint(2, 6))  # fmt: skip
        prompts.append(template.format(**numbers))
    return prompts


def summary_prompts(passages: list[str]) -> list[str]:
    """Summarisation prompts over the given passages (the recipe passes the target's own chat answers)."""
    return [SUMMARY_TASKS[i % len(SUMMARY_TASKS)].format(passage=p.strip()) for i, p in enumerate(passages)]


# ------------------------------------------------------------------ conversations and passages (EAGLE head, round 2)
#
# The templated chat prompts above taught the head their own answers by heart (92% first-guess agreement on
# training answers, 57% on held-out ones, about 31% on the benchmark's chats). These are more varied: everyday
# questions answered by the target, then a follow-up about its answer (two turns, as in the benchmark's chat
# task), and passages the target writes itself, then summarised or searched for facts.

QUESTIONS = [
    "How do I keep basil alive on a windowsill?",
    "What is a good way to save money on groceries?",
    "Why does bread go stale?",
    "How can I fall asleep faster?",
    "What should I pack for a weekend camping trip?",
    "How does a credit score work?",
    "What is the best way to learn a new language as an adult?",
    "Why is the sky blue?",
    "How do I ask my manager for a raise?",
    "What are some easy dinners I can cook in 20 minutes?",
    "How do vaccines train the immune system?",
    "What is the difference between a virus and a bacterium?",
    "How can I make my laptop battery last longer?",
    "What is compound interest?",
    "How do I start a daily journaling habit?",
    "Why do cats purr?",
    "How should I prepare for a job interview?",
    "What causes the seasons on Earth?",
    "How do I clean a cast-iron pan?",
    "What is a healthy amount of screen time for children?",
    "How do solar panels make electricity?",
    "What should I look for when buying a used car?",
    "How do I write a good cover letter?",
    "Why do leaves change colour in autumn?",
    "What is inflation and why does it happen?",
    "How can I stop procrastinating?",
    "What is the Pythagorean theorem used for in everyday life?",
    "How do I train a puppy to sit?",
    "What are the main causes of the First World War?",
    "How can I reduce food waste at home?",
    "What is a good stretching routine for people who sit all day?",
    "How do airplanes stay in the air?",
    "What is the difference between a stock and a bond?",
    "How do I make friends in a new city?",
    "Why do we dream?",
    "How can I improve my handwriting?",
    "What is the best way to memorise a speech?",
    "How does recycling plastic actually work?",
    "What are the signs of dehydration?",
    "How do I choose a good password?",
    "Why do onions make people cry?",
    "How do I plan a birthday party for a six-year-old?",
    "What is the water cycle?",
    "How can I be more productive when working from home?",
    "What should I know before adopting a rabbit?",
    "How do tides work?",
    "What is a balanced breakfast?",
    "How can I get better at chess?",
    "Why is exercise good for mental health?",
    "How do I negotiate the price of a new apartment?",
    "What were the Olympic Games like in ancient Greece?",
    "How do I fix a squeaky door?",
    "What is the difference between baking soda and baking powder?",
    "How can I help a friend who is feeling lonely?",
    "What does a project manager do?",
    "How do earthquakes happen?",
    "How do I start learning to draw?",
    "What is the healthiest way to lose weight?",
    "How do noise-cancelling headphones work?",
    "What should I do if my phone gets wet?",
    "How do I become a better listener?",
    "Why do some people get seasick?",
    "How can I teach my child to ride a bike?",
    "What are the rules of volleyball?",
]

HELD_OUT_QUESTIONS = [
    "How do I grow tomatoes from seed?",
    "Why does ice float on water?",
    "What is a mortgage?",
    "How can I make my morning routine calmer?",
    "How do electric cars charge?",
    "What is the best way to study for an exam?",
    "How do bees make honey?",
    "What should I do before a long flight?",
]

FOLLOW_UPS = [
    "Can you give me a concrete example?",
    "Why does that work?",
    "What if I only have ten minutes a day?",
    "Can you explain that more simply?",
    "What mistakes do beginners usually make?",
    "How long does it usually take to see results?",
    "Is there a cheaper way to do it?",
    "Can you put that in a short list?",
    "What would you do first?",
    "Are there any risks I should know about?",
    "How would you explain that to a child?",
    "What if that does not work for me?",
    "Can you say the same thing in one sentence?",
    "Which of those is the most important?",
    "Now write it as a short poem.",
    "What do experts disagree about here?",
]

HELD_OUT_FOLLOW_UPS = [
    "Could you give me two more tips?",
    "What is the science behind it?",
    "How would this change for someone older?",
]

PASSAGE_REQUESTS = [
    "Write a short news report, about 100 words, about {s}. Name the people involved and give dates and numbers.",
    "Write a short product description, about 100 words, for {s}, with its price and main features.",
    "Write the minutes of a short meeting, about 100 words, about {s}, naming who said what.",
    "Write a short announcement, about 100 words, about {s}, with times, places and prices.",
]

PASSAGE_SUBJECTS = [
    "a town opening a new swimming pool",
    "a school science fair",
    "a bakery changing its opening hours",
    "a new bicycle lane",
    "a charity book sale",
    "a football club hiring a coach",
    "a museum exhibition of old maps",
    "a neighbourhood clean-up day",
    "a folding electric scooter",
    "a community orchestra concert",
    "a farmers' market moving to a new square",
    "a library's summer reading challenge",
    "a hospital opening a new wing",
    "a mountain hut reopening after repairs",
    "a company launching a recycling programme",
    "a cooking class for beginners",
    "a water-proof hiking backpack",
    "a city replacing its street lights",
    "a chess tournament for students",
    "a theatre's new season",
    "a garden centre's spring sale",
    "a village festival",
    "a bus route changing its timetable",
    "a start-up building a weather app",
]

HELD_OUT_PASSAGE_SUBJECTS = ["a harbour renovation", "a robotics club", "a new tram line", "a wool sweater"]

PASSAGE_TASKS = [
    "Summarise this text in two sentences.\n\n{passage}",
    "Who is mentioned in this text, and what does each person do?\n\n{passage}",
    "List every number in this text and say what it refers to.\n\n{passage}",
    "Give this text a headline and a one-line summary.\n\n{passage}",
    "Extract the dates, times and places from this text as a bulleted list.\n\n{passage}",
    "Explain this text to a child in three short sentences.\n\n{passage}",
]


def question_prompts(held_out: bool = False) -> list[str]:
    """Everyday questions, answered first on their own; their answers start the two-turn conversations."""
    return list(HELD_OUT_QUESTIONS if held_out else QUESTIONS)


def conversations(
    questions: list[str], answers: list[str], held_out: bool = False, per_question: int = 3
) -> list[list[dict]]:
    """Two-turn chats: a question, the first two sentences of the target's own answer, then a follow-up; each
    question gets `per_question` different follow-ups."""
    import re

    follow_ups = HELD_OUT_FOLLOW_UPS if held_out else FOLLOW_UPS
    chats = []
    for i, (question, answer) in enumerate(zip(questions, answers, strict=True)):
        paragraph = answer.strip().split("\n\n")[0]  # the first paragraph's first two sentences ("1." ends none)
        short = " ".join(re.split(r"(?<=[^\d\s][.!?])\s+", paragraph)[:2])
        for j in range(per_question):
            follow_up = follow_ups[(i * per_question + j) % len(follow_ups)]
            chats.append([{"role": "user", "content": question}, {"role": "assistant", "content": short},
                          {"role": "user", "content": follow_up}])  # fmt: skip
    return chats


def passage_requests(held_out: bool = False) -> list[str]:
    """Requests for passages with names, numbers and dates; the target writes them, then they are summarised."""
    subjects = HELD_OUT_PASSAGE_SUBJECTS if held_out else PASSAGE_SUBJECTS
    n = len(PASSAGE_REQUESTS)
    return [PASSAGE_REQUESTS[(i + j) % n].format(s=s) for i, s in enumerate(subjects) for j in (0, n // 2)]


def passage_prompts(passages: list[str], per_passage: int = 3) -> list[str]:
    """Summary and extraction prompts over the target's own passages, `per_passage` different ones each."""
    return [PASSAGE_TASKS[(i * per_passage + j) % len(PASSAGE_TASKS)].format(passage=p.strip())
            for i, p in enumerate(passages) for j in range(per_passage)]  # fmt: skip
